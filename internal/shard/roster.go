package shard

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// MemberPrefix is the folder of the member blobs in the lock container:
// an instance's member blob is {MemberPrefix}/{member}/0 (a one-slot
// trafficcop.Semaphore named after the member).
const MemberPrefix = "members"

var unsafeMember = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// MemberName is the member name of an instance id: the id with every
// character other than letters, digits, '.', '_' and '-' replaced by '_',
// and cut to 200 characters.
func MemberName(instanceID string) string {
	s := unsafeMember.ReplaceAllString(instanceID, "_")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// BlobRoster lists the member blobs of a container: a member is live while
// the Blob service reports its lease leased (or breaking). It deletes the
// blobs of members found not live for longer than Forget, so that the
// listing does not grow with every restart.
type BlobRoster struct {
	C *container.Client
	// Forget is how long a member blob stays after its lease was last seen
	// in force. Zero: never deleted.
	Forget time.Duration
	Clock  clock.Clock

	mu   sync.Mutex
	dead map[string]time.Time // blob → first seen not live
}

// Member is one member blob as listed.
type Member struct {
	Name string
	Live bool
}

// Live returns the names of the live members, in order.
func (r *BlobRoster) Live(ctx context.Context) ([]string, error) {
	all, err := r.Members(ctx)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, m := range all {
		if m.Live {
			live = append(live, m.Name)
		}
	}
	return live, nil
}

// Members lists every member blob (one request per 5,000 members) and
// forgets the long-dead ones.
func (r *BlobRoster) Members(ctx context.Context) ([]Member, error) {
	var out []Member
	seen := map[string]bool{}
	pager := r.C.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr(MemberPrefix + "/")})
	now := r.Clock.Now()
	r.mu.Lock()
	if r.dead == nil {
		r.dead = map[string]time.Time{}
	}
	r.mu.Unlock()
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list member blobs: %w", storage.Translate(err))
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name == nil || b.Properties == nil {
				continue
			}
			name, ok := strings.CutPrefix(*b.Name, MemberPrefix+"/")
			name, ok2 := strings.CutSuffix(name, "/0")
			if !ok || !ok2 || name == "" {
				continue
			}
			st := b.Properties.LeaseState
			live := st != nil && (*st == lease.StateTypeLeased || *st == lease.StateTypeBreaking)
			out = append(out, Member{Name: name, Live: live})
			seen[*b.Name] = true
			if live || r.Forget <= 0 {
				r.forgetDeath(*b.Name)
				continue
			}
			r.mu.Lock()
			since, known := r.dead[*b.Name]
			if !known {
				r.dead[*b.Name] = now
			}
			r.mu.Unlock()
			if known && now.Sub(since) >= r.Forget {
				// Only a blob without a lease in force can be deleted, so a
				// member that has just taken it again keeps it.
				if _, err := r.C.NewBlobClient(*b.Name).Delete(ctx, nil); err == nil {
					r.forgetDeath(*b.Name)
				}
			}
		}
	}
	r.mu.Lock()
	for b := range r.dead {
		if !seen[b] {
			delete(r.dead, b)
		}
	}
	r.mu.Unlock()
	return out, nil
}

func (r *BlobRoster) forgetDeath(blob string) {
	r.mu.Lock()
	delete(r.dead, blob)
	r.mu.Unlock()
}

// Package presence makes every worker visible from its start to its stop,
// idle or busy: a small blob per instance ({Prefix}/{member}), written when
// the worker starts and again every Every, and deleted when it stops. The
// fleet page and `leasecron stats` list the blobs (one request per 5,000
// instances) and judge an instance present by the service's Last-Modified
// time of its blob, so no worker's clock is compared with another's.
//
// It costs a worker 3600/Every writes an hour (12 with the default) and
// one at its start and stop. Sharded workers also hold a member lease
// (package shard), which says at once when one dies; presence says it
// within Every.
package presence

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Prefix is the folder of the presence blobs in the lock container.
const Prefix = "presence"

// DefaultEvery is how often a worker writes its presence blob again.
const DefaultEvery = 5 * time.Minute

// Metadata keys of a presence blob.
const (
	metaInstance = "instance"
	metaVersion  = "version"
	metaStarted  = "started"
	// metaDrainBy and metaDrainAt are written by RequestDrain: who asked
	// the instance to drain, and when.
	metaDrainBy = "drainby"
	metaDrainAt = "drainat"
	// metaDraining is written by the instance when it has seen the
	// request and stopped taking work.
	metaDraining = "draining"
	// metaDrainEvery says that the instance looks for drain requests, and
	// how often (instances of earlier releases, and those that never
	// look, leave it out).
	metaDrainEvery = "drainevery"
	// metaQueues lists the named queues the instance consumes, separated
	// by commas; noQueues says it consumes none (instances of earlier
	// releases leave it out, and those of earlier releases that do not
	// consume too).
	metaQueues = "queues"
	noQueues   = "-"
	// metaRoles lists what the instance does, separated by commas (lead,
	// consume, blackboard); noQueues says it does none of them. Instances
	// of earlier releases leave it out.
	metaRoles = "roles"
)

// DefaultDrainEvery is how often a worker looks for a drain request
// (WorkerOptions.DrainCheck): one metadata read each time, 360 an hour.
const DefaultDrainEvery = 10 * time.Second

// ErrNotPresent: RequestDrain found no presence blob of the instance.
var ErrNotPresent = errors.New("no running instance by that id")

// ErrNoDrain: RequestDrain found an instance that does not look for drain
// requests (an earlier release, or one told never to look).
var ErrNoDrain = errors.New("the instance does not take drain requests")

// Instance is a worker as its presence blob shows it.
type Instance struct {
	// ID is the instance id (worker.instance_id).
	ID string
	// Version is what it runs.
	Version string
	// Started is when it started (its own clock).
	Started time.Time
	// Seen is when it last wrote its blob (the service's clock).
	Seen time.Time
	// DrainEvery is how often it looks for a drain request (0: never).
	DrainEvery time.Duration
	// DrainBy and DrainAt say who asked it to drain and when (empty when
	// nobody has); Draining is when it began to (zero until it has seen
	// the request).
	DrainBy  string
	DrainAt  time.Time
	Draining time.Time
	// Queues are the named queues it consumes (nil: not said, as by an
	// earlier release; empty: none).
	Queues []string
	// Roles are what it does: lead, consume, blackboard (nil: not said,
	// as by an earlier release; empty: none).
	Roles []string
}

// Present reports whether the instance wrote its blob within two periods
// (DefaultEvery) and a minute before now: a stopped worker deletes its
// blob, a killed one is absent after that.
func (i Instance) Present(now time.Time) bool {
	return now.Sub(i.Seen) < 2*DefaultEvery+time.Minute
}

// Announcer keeps one instance's presence blob.
type Announcer struct {
	C        *container.Client
	Name     string // the blob's name under Prefix (shard.MemberName of the id)
	Instance string
	Version  string
	Clock    clock.Clock
	Logger   *slog.Logger
	// DrainEvery is how often it reads the blob's metadata for a drain
	// request (RequestDrain); 0 never looks.
	DrainEvery time.Duration
	// OnDrain is called once, with who asked, when a drain request is
	// found; the blob then says the instance is draining until it is
	// deleted.
	OnDrain func(by string)
	// Queues are the named queues the instance consumes.
	Queues []string
	// NoConsume says it consumes no queue: written as such, so that a
	// reader does not take the instance for one of an earlier release,
	// which consumed the default queue (a review found a leader-only
	// instance listed as the default queue's consumer, hiding that no
	// worker ran its tasks).
	NoConsume bool
	// Roles are what the instance does (lead, consume, blackboard), for
	// the fleet page and drain's warnings; nil writes none.
	Roles []string
	// Relaxed, when set and true, says the instance hears of drain
	// requests another way (the leader's note in the lease, read at every
	// lease poll, and Look): it then reads its blob only every
	// RelaxedEvery, as a safety net.
	Relaxed func() bool

	lookOnce sync.Once
	look     chan struct{}
}

// RelaxedEvery is how often a relaxed instance reads its blob for a drain
// request (see Announcer.Relaxed).
const RelaxedEvery = 5 * time.Minute

// Look asks Run to read the blob for a drain request now (the leader said
// there is one). It never blocks.
func (a *Announcer) Look() {
	select {
	case a.lookCh() <- struct{}{}:
	default:
	}
}

func (a *Announcer) lookCh() chan struct{} {
	a.lookOnce.Do(func() { a.look = make(chan struct{}, 1) })
	return a.look
}

// Run writes the blob now and every DefaultEvery until ctx ends, then
// deletes it; every DrainEvery between the writes it looks for a drain
// request. The periodic write is conditional on the blob being as it
// last wrote or read it, so a drain request set in between is never
// overwritten: the write is refused and the next look finds it.
// A write that fails is logged and tried again at the next period (or
// after a few seconds for the first one); Run returns nil when ctx ends.
func (a *Announcer) Run(ctx context.Context) error {
	clk := clock.OrReal(a.Clock)
	log := a.Logger
	if log == nil {
		log = slog.Default()
	}
	started := clk.Now().UTC()
	bc := a.C.NewBlockBlobClient(Prefix + "/" + a.Name)
	meta := map[string]*string{
		metaInstance: to.Ptr(a.Instance),
		metaStarted:  to.Ptr(started.Format(time.RFC3339Nano)),
	}
	if a.Version != "" {
		meta[metaVersion] = to.Ptr(a.Version)
	}
	if a.DrainEvery > 0 {
		meta[metaDrainEvery] = to.Ptr(a.DrainEvery.String())
	}
	if a.NoConsume {
		meta[metaQueues] = to.Ptr(noQueues)
	} else if len(a.Queues) > 0 {
		meta[metaQueues] = to.Ptr(strings.Join(a.Queues, ","))
	}
	if a.Roles != nil {
		meta[metaRoles] = to.Ptr(cmp.Or(strings.Join(a.Roles, ","), noQueues))
	}
	var etag *azcore.ETag // the blob as this instance last wrote or read it
	written, created, draining := false, false, false
	var looked time.Time // when it last read the blob for a drain request
	poked := false       // Look asked
	nextWrite := clk.Now()
	for {
		if !clk.Now().Before(nextWrite) {
			opts := &blockblob.UploadOptions{Metadata: meta}
			if etag != nil {
				opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: etag}}
			}
			resp, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), opts)
			switch {
			case err == nil:
				written, etag, nextWrite = true, resp.ETag, clk.Now().Add(DefaultEvery)
			case ctx.Err() != nil:
			case errors.Is(storage.Translate(err), storage.ErrPreconditionFailed):
				// Someone wrote it since: look for a drain request now.
				etag = nil
				if a.DrainEvery <= 0 || draining {
					continue
				}
			default:
				err = storage.Translate(err)
				nextWrite = clk.Now().Add(DefaultEvery)
				if !written {
					nextWrite = clk.Now().Add(5 * time.Second)
				}
				if errors.Is(err, storage.ErrNotFound) && !created {
					// The container is made by the worker's start; on a
					// fresh account it may not be there yet.
					created = true
					if _, cerr := a.C.Create(ctx, nil); cerr == nil {
						continue
					}
				}
				log.Warn("writing this instance's presence failed; trying again", "err", err)
			}
		}
		relaxed := a.Relaxed != nil && a.Relaxed()
		if written && a.DrainEvery > 0 && !draining && (poked || !relaxed || clk.Now().Sub(looked) >= RelaxedEvery) {
			looked, poked = clk.Now(), false
			by, tag, found, err := a.lookForDrain(ctx, bc, meta, clk)
			switch {
			case found:
				draining, etag = true, tag
				log.Info("asked to drain: this instance stops taking work, finishes what it runs and stops", "by", by)
				if a.OnDrain != nil {
					a.OnDrain(by)
				}
			case err == nil:
				etag = tag
			case errors.Is(err, storage.ErrNotFound):
				etag, nextWrite = nil, clk.Now() // gone: write it again
			}
		}
		// Wake every DrainEvery even while relaxed (free: no request), so
		// that an instance that stops being relaxed (it took the lease)
		// looks again at its pace.
		wait := nextWrite.Sub(clk.Now())
		if a.DrainEvery > 0 && !draining && (wait > a.DrainEvery || !written) {
			wait = a.DrainEvery
		}
		t := clk.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-a.lookCh():
			poked = true
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := bc.Delete(dctx, nil); err != nil && !errors.Is(storage.Translate(err), storage.ErrNotFound) {
		log.Warn("removing this instance's presence failed; it shows until it lapses", "err", err)
	}
	return nil
}

// lookForDrain reads the blob's metadata. With a drain request in it, it
// marks the blob draining (keeping the request) and returns who asked,
// found, and the blob's new ETag (nil if marking failed: the next write
// is then unconditional and says so). Without one it returns the ETag
// read.
func (a *Announcer) lookForDrain(ctx context.Context, b *blockblob.Client, meta map[string]*string, clk clock.Clock) (by string, etag *azcore.ETag, found bool, err error) {
	props, err := b.GetProperties(ctx, nil)
	if err != nil {
		return "", nil, false, storage.Translate(err)
	}
	in := fromMetadata(props.Metadata)
	if in.DrainAt.IsZero() {
		return "", props.ETag, false, nil
	}
	meta[metaDrainBy] = to.Ptr(in.DrainBy)
	meta[metaDrainAt] = to.Ptr(in.DrainAt.Format(time.RFC3339Nano))
	meta[metaDraining] = to.Ptr(clk.Now().UTC().Format(time.RFC3339Nano))
	resp, err := b.SetMetadata(ctx, meta, &blob.SetMetadataOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}}})
	if err != nil {
		return in.DrainBy, nil, true, nil
	}
	return in.DrainBy, resp.ETag, true, nil
}

// RequestDrain asks the running instance whose presence blob is name to
// drain: it stops taking new work, finishes what it runs, releases what it
// holds and stops, within its DrainEvery. It returns the instance as its
// blob shows it (DrainAt set); asking again changes nothing. A blob not
// there, or not written for longer than Present allows, is ErrNotPresent
// (with the latter's Instance).
func RequestDrain(ctx context.Context, c *container.Client, name, by string, now time.Time) (Instance, error) {
	b := c.NewBlockBlobClient(Prefix + "/" + name)
	for range 5 {
		props, err := b.GetProperties(ctx, nil)
		if err != nil {
			if err = storage.Translate(err); errors.Is(err, storage.ErrNotFound) {
				return Instance{}, ErrNotPresent
			}
			return Instance{}, fmt.Errorf("read presence of %s: %w", name, err)
		}
		in := fromMetadata(props.Metadata)
		if props.LastModified != nil {
			in.Seen = props.LastModified.UTC()
		}
		if !in.Present(now) {
			return in, ErrNotPresent // a killed worker's: leave it to lapse
		}
		if !in.DrainAt.IsZero() {
			return in, nil
		}
		if in.DrainEvery <= 0 {
			return in, ErrNoDrain
		}
		meta := props.Metadata
		in.DrainBy, in.DrainAt = by, now.UTC()
		meta[metaDrainBy] = to.Ptr(by)
		meta[metaDrainAt] = to.Ptr(in.DrainAt.Format(time.RFC3339Nano))
		_, err = b.SetMetadata(ctx, meta, &blob.SetMetadataOptions{
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}}})
		if err == nil {
			return in, nil
		}
		if err = storage.Translate(err); !errors.Is(err, storage.ErrPreconditionFailed) {
			if errors.Is(err, storage.ErrNotFound) {
				return Instance{}, ErrNotPresent
			}
			return Instance{}, fmt.Errorf("ask %s to drain: %w", name, err)
		}
		// The instance rewrote its blob meanwhile: read it again.
	}
	return Instance{}, fmt.Errorf("ask %s to drain: the blob kept changing; try again", name)
}

// fromMetadata reads an instance from a presence blob's metadata (the
// service may hand keys back in any case).
func fromMetadata(m map[string]*string) Instance {
	var in Instance
	for k, v := range m {
		if v == nil {
			continue
		}
		switch strings.ToLower(k) {
		case metaInstance:
			in.ID = *v
		case metaVersion:
			in.Version = *v
		case metaStarted:
			in.Started, _ = time.Parse(time.RFC3339Nano, *v)
		case metaDrainBy:
			in.DrainBy = *v
		case metaDrainAt:
			in.DrainAt, _ = time.Parse(time.RFC3339Nano, *v)
		case metaDraining:
			in.Draining, _ = time.Parse(time.RFC3339Nano, *v)
		case metaDrainEvery:
			in.DrainEvery, _ = time.ParseDuration(*v)
		case metaQueues:
			in.Queues = []string{}
			if *v != noQueues {
				in.Queues = strings.Split(*v, ",")
			}
		case metaRoles:
			in.Roles = []string{}
			if *v != noQueues {
				in.Roles = strings.Split(*v, ",")
			}
		}
	}
	return in
}

// List returns every presence blob (one request per 5,000 blobs).
func List(ctx context.Context, c *container.Client) ([]Instance, error) {
	var out []Instance
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  to.Ptr(Prefix + "/"),
		Include: container.ListBlobsInclude{Metadata: true},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			err = storage.Translate(err)
			if errors.Is(err, storage.ErrNotFound) {
				return nil, nil // no container yet: nobody has started
			}
			return nil, fmt.Errorf("list presence blobs: %w", err)
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name == nil || b.Properties == nil || b.Properties.LastModified == nil {
				continue
			}
			in := fromMetadata(b.Metadata)
			in.ID = cmp.Or(in.ID, strings.TrimPrefix(*b.Name, Prefix+"/"))
			in.Seen = b.Properties.LastModified.UTC()
			out = append(out, in)
		}
	}
	return out, nil
}

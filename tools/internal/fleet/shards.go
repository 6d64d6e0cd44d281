package fleet

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron"
)

// ShardsSettled reports whether every shard of r is owned by a live
// member, none is being handed over, and the shares differ by at most one;
// it returns each live member's shards.
func ShardsSettled(r leasecron.ShardReport) (map[string][]string, bool) {
	live := map[string]bool{}
	for _, m := range r.Members {
		if m.Live {
			live[m.Name] = true
		}
	}
	owned := map[string][]string{}
	for m := range live {
		owned[m] = nil
	}
	for _, s := range r.Shards {
		if !live[s.Owner] || s.HandingOverFrom != "" {
			return owned, false
		}
		owned[s.Owner] = append(owned[s.Owner], s.Shard)
	}
	lo, hi := len(r.Shards), 0
	for _, ss := range owned {
		lo, hi = min(lo, len(ss)), max(hi, len(ss))
	}
	return owned, len(live) > 0 && hi-lo <= 1
}

// WaitShardsSettled polls cl every 100 ms until the shards are settled
// among exactly want live members, and returns their shards; it fails
// when ctx ends first.
func WaitShardsSettled(ctx context.Context, cl *leasecron.Client, want int) (map[string][]string, error) {
	for {
		r, err := cl.Shards(ctx)
		if err == nil {
			if owned, ok := ShardsSettled(r); ok && len(owned) == want {
				return owned, nil
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("shards never settled among %d members: %+v: %w", want, r, cmp.Or(err, ctx.Err()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitShardCount polls cl every 200 ms until the shard map's count is n
// and no change of it is under way (every shard's tasks findable under
// n); it fails when ctx ends first.
func WaitShardCount(ctx context.Context, cl *leasecron.Client, n int) error {
	for {
		r, err := cl.Shards(ctx)
		if err == nil && r.MapCount == n && r.PrevCount == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the shard count never settled at %d: %+v: %w", n, r, cmp.Or(err, ctx.Err()))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

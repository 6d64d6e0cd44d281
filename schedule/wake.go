package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/shard"
)

// ownerWaker wakes the owner of a quiet shard after a write (a sharded
// schedule only): the owner of a shard with nothing due within its early
// window stops polling it and publishes in the shard map the due time
// before which a new row needs a wake (internal/shard). The client reads
// the map at most once per shard.ClientMapTTL.
type ownerWaker struct {
	mu sync.Mutex
	m  shard.Map
	at time.Time // when m was read (zero: never)
}

// wakeOwner tells shard's owner about a row due at due when it has gone
// quiet past it: a best-effort write (a failure is logged; the owner's
// round-robin look finds the row later).
func (c *Client) wakeOwner(ctx context.Context, sh string, due time.Time) {
	if len(c.opts.Shards) < 2 || ctx.Err() != nil {
		return
	}
	w := &c.waker
	now := c.opts.Clock.Now()
	w.mu.Lock()
	m, fresh := w.m, !w.at.IsZero() && now.Sub(w.at) < shard.ClientMapTTL
	w.mu.Unlock()
	if !fresh {
		read, err := shard.Read(ctx, c.t)
		if err != nil {
			c.opts.Logger.Warn("cannot read the shard map to wake the owner of a new task's shard; it finds the task at its next look", "shard", sh, "err", err)
			return
		}
		w.mu.Lock()
		w.m, w.at, m = read, now, read
		w.mu.Unlock()
	}
	if woke, err := shard.Wake(ctx, c.t, m, sh, due); err != nil {
		c.opts.Logger.Warn("cannot wake the owner of a new task's shard; it finds the task at its next look", "shard", sh, "err", err)
	} else if woke {
		// The owner republishes; read the map again next time.
		w.mu.Lock()
		w.at = time.Time{}
		w.mu.Unlock()
	}
}

// wakeOwners wakes the owners of the shards of the items written.
func (c *Client) wakeOwners(ctx context.Context, res []AddResult) {
	if len(c.opts.Shards) < 2 {
		return
	}
	first := map[string]time.Time{}
	for _, r := range res {
		if r.Err != nil || r.Item.Shard == "" {
			continue
		}
		if t, ok := first[r.Item.Shard]; !ok || r.Item.Due.Before(t) {
			first[r.Item.Shard] = r.Item.Due
		}
	}
	for sh, due := range first {
		c.wakeOwner(ctx, sh, due)
	}
}

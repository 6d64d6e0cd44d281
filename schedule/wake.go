package schedule

import (
	"context"
	"time"

	"github.com/leasecron/leasecron/internal/shard"
)

// wakeOwner tells shard's owner about a row due at due when it has gone
// quiet past it: a best-effort write (a failure is logged; the owner's
// round-robin look finds the row later).
func (c *Client) wakeOwner(ctx context.Context, sh string, due time.Time) {
	if !c.opts.ShardMap || ctx.Err() != nil {
		return
	}
	m, err := c.shardMap(ctx)
	if err != nil {
		c.opts.Logger.Warn("cannot read the shard map to wake the owner of a new task's shard; it finds the task at its next look", "shard", sh, "err", err)
		return
	}
	if woke, err := shard.Wake(ctx, c.t, m, sh, due); err != nil {
		c.opts.Logger.Warn("cannot wake the owner of a new task's shard; it finds the task at its next look", "shard", sh, "err", err)
	} else if woke {
		c.forget() // the owner republishes; read the map again next time
	}
}

// wakeOwners wakes the owners of the shards of the items written.
func (c *Client) wakeOwners(ctx context.Context, res []AddResult) {
	if !c.opts.ShardMap {
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

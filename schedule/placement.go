package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// placement is where tasks go: by parts, and while a change of the shard
// count is applied also where they went before (prev); span is every
// partition that may hold tasks.
type placement struct {
	parts table.Partitions
	prev  *table.Partitions
	span  []string
	// open is the RowKey of the open row a unique take placed by parts
	// requires in its shard ("" when the map names none for its count;
	// see shard.Map.Open).
	open string
}

// openOp is the operation a transaction of a unique take in shard
// includes to require its shard's open row: a merge of nothing, which
// fails when the row is gone (the walk under a later count deleted it).
func (p placement) openOp(shard string) []table.Op {
	if p.open == "" {
		return nil
	}
	return []table.Op{{Kind: table.Merge, PartitionKey: shard, RowKey: p.open, Props: table.Props{}}}
}

// closed reports whether a transaction of pl's in shard that failed
// with err failed because shard's open row is gone (ErrShardCountChanged): this
// write was placed by a count the fleet has left, or the row of the
// count the fleet is on is missing (written by a release before the open
// rows, or its shard walked by one), which it writes again first, so that
// a take placed again succeeds. It reads the row only for a failure a
// missing row explains.
func (c *Client) closed(ctx context.Context, pl placement, shard string, err error) (bool, error) {
	if pl.open == "" || !errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	_, gerr := c.t.Get(ctx, shard, pl.open)
	if !errors.Is(gerr, storage.ErrNotFound) {
		return false, nil
	}
	c.forget()
	return true, c.reopen(ctx, shard)
}

// reopen writes shard sh's open row again when the map, read afresh,
// names the count it is on as Open with no change under way: then no walk
// deletes that row (closeOpen acts only while a change to another count
// is), and without it every take in sh would fail until the next leader's
// first cycle writes the rows again (shard.Balancer).
func (c *Client) reopen(ctx context.Context, sh string) error {
	// Read afresh, never the map read before: a client that cannot read
	// it and kept an old count must not write that count's row again.
	m, err := shard.Read(ctx, c.t)
	if err != nil {
		return fmt.Errorf("shard %s: read the shard map: %w", sh, err)
	}
	count := m.Count
	if count == 0 && len(c.opts.Shards) == 1 {
		count = 1 // no map: unsharded
	} else if m.PrevCount != 0 || count == 0 || m.Open != count {
		return nil
	}
	if !slices.Contains(shard.Names(count), sh) {
		return nil
	}
	return shard.Reopen(ctx, c.t, sh, count)
}

// same reports whether p and q place every key alike and look in the
// same shards.
func (p placement) same(q placement) bool {
	return p.parts.Len() == q.parts.Len() && (p.prev == nil) == (q.prev == nil) &&
		(p.prev == nil || p.prev.Len() == q.prev.Len()) && len(p.span) == len(q.span)
}

// of returns the shard of key.
func (p placement) of(key string) string { return p.parts.Of(key) }

// prevOf returns the shard key had under the previous count, when a
// change is under way and it differs.
func (p placement) prevOf(key string) (string, bool) {
	if p.prev == nil {
		return "", false
	}
	s := p.prev.Of(key)
	return s, s != p.of(key)
}

// mapCache is the shard map as this client last read it
// (Options.ShardMap): it places tasks by the map's count and tells the
// owners of quiet shards about new tasks (wake.go). It is read at most
// once per shard.ClientMapTTL (see shardMap).
type mapCache struct {
	mu sync.Mutex
	m  shard.Map // zero until read, and while none was there
	at time.Time // when m was read (zero: read again)
}

// shardMap returns the shard map, read again when older than
// shard.ClientMapTTL (shard.UnshardedMapTTL while a client configured for
// one shard has found none). When it cannot be read it returns the one read
// before, or the read's error when none was, or none was there.
func (c *Client) shardMap(ctx context.Context) (shard.Map, error) {
	mc := &c.maps
	now := c.opts.Clock.Now()
	mc.mu.Lock()
	ttl := shard.ClientMapTTL
	if mc.m.Count == 0 && len(c.opts.Shards) == 1 {
		ttl = shard.UnshardedMapTTL // no map yet, and none expected
	}
	m, fresh := mc.m, !mc.at.IsZero() && now.Sub(mc.at) < ttl
	mc.mu.Unlock()
	if fresh {
		return m, nil
	}
	read, err := shard.Read(ctx, c.t)
	if err != nil {
		if m.Count == 0 {
			// None read yet, or none there when last read: a map may have
			// been written since, and placing by the configured count
			// would put tasks where sharded processes do not look.
			return shard.Map{}, err
		}
		c.opts.Logger.Warn("cannot read the shard map; using the one read before", "err", err)
		return m, nil
	}
	mc.mu.Lock()
	mc.m, mc.at = read, now
	mc.mu.Unlock()
	return read, nil
}

// placeFresh is place for a write that must not be placed by a view of
// "no map" another client may already have left behind: a client on one
// shard that found no map trusts that for shard.UnshardedMapTTL, and in
// the first seconds of a switch to sharding a client that has read the
// new map places a unique key's guard elsewhere (issue 38). Such a view
// older than shard.ClientMapTTL is read again first; otherwise it is
// place.
func (c *Client) placeFresh(ctx context.Context) (placement, error) {
	if c.noMapOlderThan(shard.ClientMapTTL) {
		c.forget()
	}
	return c.place(ctx)
}

// noMapOlderThan reports whether this client (Options.ShardMap) last
// found no shard map, longer than d ago.
func (c *Client) noMapOlderThan(d time.Duration) bool {
	if !c.opts.ShardMap {
		return false
	}
	c.maps.mu.Lock()
	defer c.maps.mu.Unlock()
	return c.maps.m.Count == 0 && !c.maps.at.IsZero() && c.opts.Clock.Now().Sub(c.maps.at) >= d
}

// mapChanged reads the shard map again, when this client last found none
// more than shard.ClientMapTTL ago, and reports whether the placement it
// gives differs from pl: a lookup that missed looks again by the new one
// (a task placed by another client that read the first sharded map
// before this one, which trusts finding none for shard.UnshardedMapTTL;
// issue 38, the simulator's seed 6835).
func (c *Client) mapChanged(ctx context.Context, pl placement) (placement, bool) {
	if !c.noMapOlderThan(shard.ClientMapTTL) {
		return pl, false
	}
	now, err := c.placeFresh(ctx)
	if err != nil || now.same(pl) {
		return pl, false
	}
	return now, true
}

// forget makes the next shardMap read the map again.
func (c *Client) forget() {
	c.maps.mu.Lock()
	c.maps.at = time.Time{}
	c.maps.mu.Unlock()
}

// place returns the placement of tasks now: Options.Shards, or with
// Options.ShardMap the shard map's count (Shards until a worker has
// written the map). A map that was never read, because reading it fails,
// is an error rather than a guess: placed by the configured count, a task
// of a client still on one shard in a sharded fleet would go where no one
// looks.
func (c *Client) place(ctx context.Context) (placement, error) {
	if !c.opts.ShardMap {
		return placement{parts: c.parts, span: c.opts.Shards}, nil
	}
	m, err := c.shardMap(ctx)
	if err != nil {
		return placement{}, fmt.Errorf("place tasks by the shard map: %w", err)
	}
	return placementOf(m.Layout(len(c.opts.Shards))), nil
}

// placeKnown is place without reading the map: the one read last.
func (c *Client) placeKnown() placement {
	if !c.opts.ShardMap {
		return placement{parts: c.parts, span: c.opts.Shards}
	}
	c.maps.mu.Lock()
	m := c.maps.m
	c.maps.mu.Unlock()
	return placementOf(m.Layout(len(c.opts.Shards)))
}

func placementOf(l shard.Layout) placement {
	p := placement{parts: table.Numbered("", l.Count, 2), span: table.Numbered("", l.Span, 2).Names()}
	if l.PrevCount != 0 && l.PrevCount != l.Count {
		prev := table.Numbered("", l.PrevCount, 2)
		p.prev = &prev
	}
	switch {
	case l.Open == l.Count && l.Count > 0:
		p.open = shard.OpenRowKey(l.Count)
	case l.Count == 1 && l.PrevCount == 0:
		// No map, one shard: "00" is open to takes placed by one shard
		// until the walk under the first map's count closes it (the take
		// that finds no row writes it: reopen).
		p.open = shard.OpenRowKey(1)
	}
	return p
}

// Point makes the tasks of shard findable under a shard count of count:
// it first closes shard to unique takes placed by any other count while
// the change to count is under way (closeOpen, see shard.Map.Open); then
// for every id index row in shard whose id belongs in another shard
// under count, it writes a pointer there naming the shard that holds the
// task (PropShard), and it seals every unique guard whose key belongs in
// another shard and copies it there (unless a take under count wrote one
// there: putGuard). It is safe to repeat, to run late (a walk whose
// change has ended closes nothing), and to run beside every other use of
// the schedule; it reads shard's open rows (and then the map), index rows
// and guard rows once, seals each guard that moves with a write of its
// own, and writes the rows that belong elsewhere in transactions of up to
// 100 per shard they go to.
func (c *Client) Point(ctx context.Context, sh string, count int) error {
	parts := table.Numbered("", count, 2)
	// Rows bound for one shard go in transactions of up to table.MaxOps;
	// one that finds a row already there (a repeated walk) is written row
	// by row.
	pending := map[string][]table.Op{}
	flush := func(to string) error {
		ops := pending[to]
		delete(pending, to)
		if len(ops) == 0 {
			return nil
		}
		_, err := c.t.Submit(ctx, ops)
		if errors.Is(err, storage.ErrAlreadyExists) && (len(ops) > 1 || strings.HasPrefix(ops[0].RowKey, GuardPrefix)) {
			// Row by row (one alone is retried only when a guard, which
			// may replace an older one).
			for _, op := range ops {
				if strings.HasPrefix(op.RowKey, GuardPrefix) {
					// A guard there may be older: the newer stays.
					if err = c.putGuard(ctx, op.PartitionKey, op.RowKey, op.Props, count); err != nil {
						break
					}
					continue
				}
				if _, err = c.t.Submit(ctx, []table.Op{op}); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
					break
				}
				err = nil
			}
		}
		if err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
			return fmt.Errorf("shard %s: write %d rows into shard %s: %w", sh, len(ops), to, err)
		}
		return nil
	}
	insert := func(to, rk string, props table.Props) error {
		pending[to] = append(pending[to], table.Op{Kind: table.Insert, PartitionKey: to, RowKey: rk, Props: props})
		if len(pending[to]) < table.MaxOps {
			return nil
		}
		return flush(to)
	}
	flushAll := func() error {
		for to := range pending {
			if err := flush(to); err != nil {
				return err
			}
		}
		return nil
	}
	walk := func(from, to string, f func(e table.Entity) error) error {
		q := table.Query{Partition: sh, From: from, To: to}
		for {
			p, err := c.t.Query(ctx, q)
			if errors.Is(err, storage.ErrTableNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("shard %s: read %s rows: %w", sh, from, err)
			}
			for _, e := range p.Entities {
				if err := f(e); err != nil {
					return err
				}
			}
			if p.Continuation == "" {
				return flushAll()
			}
			q.Continuation = p.Continuation
		}
	}
	// Close sh to unique takes placed by any other count first: one that
	// lands after this walk fails, instead of taking its key where no
	// take under count looks (issue 38).
	if err := c.closeOpen(ctx, sh, count); err != nil {
		return err
	}
	err := walk(IndexPrefix, indexEnd, func(e table.Entity) error {
		id := strings.TrimPrefix(e.RowKey, IndexPrefix)
		home := sh
		if h, _, _ := e.Props.StrictString(PropShard); h != "" {
			home = h
		}
		to := parts.Of(id)
		if to == sh || to == home {
			return nil
		}
		return insert(to, e.RowKey, table.Props{PropShard: home, PropID: id})
	})
	if err != nil {
		return err
	}
	return walk(GuardPrefix, guardEnd, func(e table.Entity) error {
		to := parts.Of(strings.TrimPrefix(e.RowKey, GuardPrefix)) // type~key
		if to == sh || isOpenRow(e.RowKey) {
			return nil
		}
		e, ok, err := c.sealFor(ctx, e, count)
		if err != nil || !ok || e.Props.Str(PropGuardTask) == "" {
			return err
		}
		return insert(to, e.RowKey, movedProps(e.Props, count))
	})
}

// isOpenRow reports whether rk, among the unique guards, is an open row
// (shard.OpenRowKey).
func isOpenRow(rk string) bool { return strings.HasPrefix(rk, shard.OpenRowPrefix) }

// closeOpen deletes the open rows of sh of every count but count, and
// only while the change to count is the one under way: a walk that lands
// after its change ended (its owner paused, then resumed) leaves every
// row alone, for the open row of a later count stands among them and
// without it its shard would refuse every take. Each row is deleted
// conditionally on its ETag as read (one written again since, by a change
// back to its count, stays); a row a late take changed since it was read
// is read and deleted again, so no take placed by another count keeps
// the shard open.
func (c *Client) closeOpen(ctx context.Context, sh string, count int) error {
	for range retries {
		rows, err := table.All(ctx, c.t, table.Query{Partition: sh, From: shard.OpenRowPrefix, To: shard.OpenRowPrefix + "~"}, 0)
		if errors.Is(err, storage.ErrTableNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("shard %s: read its open rows: %w", sh, err)
		}
		rows = slices.DeleteFunc(rows, func(e table.Entity) bool { return e.RowKey == shard.OpenRowKey(count) })
		if len(rows) == 0 {
			return nil
		}
		// Read after the rows: a map still changing to count was so when
		// they were read, so none of them is a later count's.
		m, err := shard.Read(ctx, c.t)
		if err != nil {
			return fmt.Errorf("shard %s: read the shard map: %w", sh, err)
		}
		if m.Count != count || m.PrevCount == 0 {
			return nil
		}
		again := false
		for _, e := range rows {
			_, err := c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: sh, RowKey: e.RowKey, IfMatch: e.ETag}})
			switch {
			case errors.Is(err, storage.ErrPreconditionFailed):
				again = true // a take merged into it since it was read
			case err != nil && !errors.Is(err, storage.ErrNotFound):
				return fmt.Errorf("shard %s: close it to takes placed by another count: %w", sh, err)
			}
		}
		if !again {
			return nil
		}
	}
	return fmt.Errorf("shard %s: close it to takes placed by another count: its open rows changed on each of %d tries", sh, retries)
}

// sealFor seals guard e, which belongs in another shard under count, so
// that no take placed by an earlier count changes it once it is copied
// there (see SealedFor). It returns the guard as sealed, and false when
// it is not to be copied: a seal for another count is left from an
// earlier spell (the key's guard was taken or copied since, where that
// spell's count put it), and a guard gone meanwhile was swept.
func (c *Client) sealFor(ctx context.Context, e table.Entity, count int) (table.Entity, bool, error) {
	for range retries {
		switch e.Props.Int(PropSealedFor) {
		case int64(count):
			return e, true, nil
		case 0:
		default:
			return e, false, nil
		}
		op := sealOp(e, count, c.opts.Clock.Now())
		_, err := c.t.Submit(ctx, []table.Op{op})
		if err == nil {
			for k, v := range op.Props {
				e.Props[k] = v
			}
			return e, true, nil
		}
		if !conflict(err) {
			return e, false, fmt.Errorf("shard %s: seal unique guard %s: %w", e.PartitionKey, e.RowKey, err)
		}
		// Taken or rechecked meanwhile: read it again.
		if e, err = c.t.Get(ctx, e.PartitionKey, e.RowKey); errors.Is(err, storage.ErrNotFound) {
			return e, false, nil
		} else if err != nil {
			return e, false, fmt.Errorf("shard %s: read unique guard %s: %w", e.PartitionKey, e.RowKey, err)
		}
	}
	return e, false, fmt.Errorf("shard %s: seal unique guard %s: still contended after %d attempts", e.PartitionKey, e.RowKey, retries)
}

// pointLanded makes tasks that this client wrote, placed by pl, findable
// by id under the shard count the map gives now, when it changed since
// pl was read: landed maps each task's id to the shard its rows went to.
// The owners' walk (Point) writes such pointers for what their shards
// hold when it runs; a write placed by the old count may land after it —
// a request slowed in flight, or a long batch placed by one map read —
// and once the change ends its task would be found by id nowhere. It
// writes a pointer for each id whose shard under the new count is another
// (one that is there already stays), and only logs what fails: the tasks
// are scheduled, and found by id through the old count's shards while
// the change lasts.
func (c *Client) pointLanded(ctx context.Context, pl placement, landed map[string]string) {
	if !c.opts.ShardMap || len(landed) == 0 {
		return
	}
	now, err := c.place(ctx)
	if err != nil || now.parts.Len() == pl.parts.Len() {
		return
	}
	byShard := map[string][]table.Op{}
	for id, home := range landed {
		if to := now.of(id); to != home {
			byShard[to] = append(byShard[to], table.Op{Kind: table.Insert, PartitionKey: to, RowKey: indexKey(id), Props: table.Props{PropShard: home, PropID: id}})
		}
	}
	for to, ops := range byShard {
		for len(ops) > 0 {
			n := min(len(ops), table.MaxOps)
			chunk := ops[:n]
			ops = ops[n:]
			_, err := c.t.Submit(ctx, chunk)
			if errors.Is(err, storage.ErrAlreadyExists) && len(chunk) > 1 {
				for _, op := range chunk {
					if _, err = c.t.Submit(ctx, []table.Op{op}); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
						break
					}
					err = nil
				}
			}
			if err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
				c.opts.Logger.Warn("cannot write pointers for tasks placed by the previous shard count; they are found by id until the change ends", "shard", to, "tasks", len(chunk), "err", err)
			}
		}
	}
}

// sealLanded is pointLanded for a unique task's guard: when the shard
// count changed since pl placed the key in shard sh, it seals the guard
// there and copies it to the key's shard under the new count, as a take
// under the new count does, so that takes there see it once the change
// ends.
func (c *Client) sealLanded(ctx context.Context, pl placement, typ, key, sh string) {
	if !c.opts.ShardMap {
		return
	}
	now, err := c.place(ctx)
	if err != nil || now.parts.Len() == pl.parts.Len() {
		return
	}
	if to := now.of(typ + "~" + key); to != sh {
		if err := c.sealGuard(ctx, sh, to, guardKey(typ, key), now.parts.Len()); err != nil {
			c.opts.Logger.Warn("cannot move a unique guard placed by the previous shard count", "key", key, "shard", sh, "err", err)
		}
	}
}

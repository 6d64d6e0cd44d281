package shard

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/randid"
	"github.com/leasecron/leasecron/internal/table"
)

// Properties of a shard row that its owner and the schedule's clients
// write.
const (
	// PropWakeBefore is published by the owner of a shard it has stopped
	// polling: a row due before it needs a wake. "" while it polls.
	PropWakeBefore = "WakeBefore"
	// PropWake is a token a client writes to wake a quiet shard's owner.
	PropWake = "Wake"
)

// ClientMapTTL is how long a client trusts the shard map it read before
// deciding whether a row it wrote needs a wake. An owner keeps polling a
// shard for longer than this (and two cycles) after publishing that it is
// going quiet, so a client that read the map just before still has its row
// seen.
const ClientMapTTL = time.Second

// UnshardedMapTTL is how long a process configured for one shard trusts
// that there is no shard map yet: it follows the map once one exists, but
// in a fleet that is never sharded it reads it this rarely. The first
// sharded owners wait it out before they make "00"'s tasks findable
// under the new count (Owner), so that no task is placed by one shard
// after that walk.
const UnshardedMapTTL = 10 * time.Second

// far is the WakeBefore of a shard without any row: every new row needs a
// wake.
var far = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// gate paces the mover of one owned shard: it passes every poll while the
// shard has rows due within the early window, and otherwise publishes
// WakeBefore (the earliest row's due time) in the map and, after a grace
// period, leaves the shard alone until a client's wake, its earliest row
// coming within the window, or the owner's round-robin look.
type gate struct {
	o     *Owner
	shard string
	kick  chan struct{}

	mu        sync.Mutex
	quiet     bool      // waiting without passes
	published time.Time // the WakeBefore written (zero: none)
	since     time.Time // when it was written
	wake      string    // the last wake token seen
	etag      string    // the shard row's ETag as last read
}

func newGate(o *Owner, a Assignment) *gate {
	return &gate{o: o, shard: a.Shard, kick: make(chan struct{}, 1), wake: a.wake, etag: a.etag}
}

// seen takes the shard row as the owner read it: a new wake token kicks
// the gate.
func (g *gate) seen(a Assignment) {
	g.mu.Lock()
	g.etag = a.etag
	woken := a.wake != g.wake
	g.wake = a.wake
	g.mu.Unlock()
	if woken {
		g.poke()
	}
}

func (g *gate) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *gate) isQuiet() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.quiet
}

// Pace is the mover's pace (schedule.MoverOptions.Pace): busy reports that
// the pass found rows due within the early window, wait how long the mover
// would wait.
func (g *gate) Pace(ctx context.Context, busy bool, wait time.Duration) error {
	if busy {
		g.unpublish(ctx)
		return g.sleep(ctx, wait)
	}
	passed := g.o.Clock.Now()
	for {
		now := g.o.Clock.Now()
		next, ok, err := g.o.NextDue(ctx, g.shard)
		if err != nil {
			return g.sleep(ctx, wait) // keep polling
		}
		wakeBefore := far
		if ok {
			wakeBefore = next
			if act := next.Add(-g.o.Early); !act.After(now.Add(wait)) {
				g.unpublish(ctx)
				d := act.Sub(now)
				if d <= 0 {
					// Already within the window, and the pass found nothing
					// to do (the row was sent early and waits to leave the
					// table): poll at the mover's pace, as an unsharded
					// mover does, not again at once.
					d = wait
				}
				return g.sleep(ctx, d)
			}
		}
		if !g.publish(ctx, wakeBefore) {
			return g.sleep(ctx, wait) // not published: clients will not wake us
		}
		// The grace is judged at now, when the look above began: a row a
		// client wrote trusting a map read before the publish is in the
		// table by since + ClientMapTTL, so only a look that began after
		// the grace is sure to have seen it.
		g.mu.Lock()
		grace := now.Sub(g.since) < g.o.grace()
		g.quiet = !grace
		g.mu.Unlock()
		if grace {
			return g.sleep(ctx, wait)
		}
		if !g.quietUntil(ctx, next, ok, now) {
			g.setQuiet(false)
			return ctx.Err()
		}
		if e := g.o.SweepEvery; e > 0 && g.o.Clock.Now().Sub(passed) >= e {
			// Kicked with the shard's sweep due: pass (and sweep) once,
			// then go quiet again — at most one pass a look, so the cost
			// of quiet shards stays bounded by the owner's cycle.
			g.setQuiet(false)
			return nil
		}
	}
}

// quietUntil waits, without passes, for the earliest row (next, when
// there is one) to come within the early window, or a kick; it reports
// true after a kick (look again) and false when the row has come near
// (ctx ended: also false).
func (g *gate) quietUntil(ctx context.Context, next time.Time, ok bool, now time.Time) bool {
	var due <-chan time.Time
	if ok {
		t := g.o.Clock.NewTimer(next.Add(-g.o.Early).Sub(now))
		defer t.Stop()
		due = t.C()
	}
	select {
	case <-ctx.Done():
		return false
	case <-due:
		return false
	case <-g.kick: // a wake or the round-robin look
		return true
	}
}

func (g *gate) setQuiet(q bool) {
	g.mu.Lock()
	g.quiet = q
	g.mu.Unlock()
}

// sleep waits d or until kicked.
func (g *gate) sleep(ctx context.Context, d time.Duration) error {
	g.setQuiet(false)
	t := g.o.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-g.kick:
	}
	return nil
}

// publish writes WakeBefore unless the same or a later value is already
// written; it reports whether the row holds it (conditional on the row as
// last read, so a change by the balancer is never overwritten).
func (g *gate) publish(ctx context.Context, wakeBefore time.Time) bool {
	g.mu.Lock()
	pub, etag := g.published, g.etag
	g.mu.Unlock()
	if !pub.IsZero() && !wakeBefore.Before(pub) {
		return true
	}
	if g.write(ctx, etag, wakeBefore.UTC().Format(time.RFC3339Nano)) != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if pub.IsZero() {
		g.since = g.o.Clock.Now()
	}
	g.published = wakeBefore
	return true
}

// write sets WakeBefore to v in the shard's row, conditional on the row
// as last read (etag), and keeps the row's new ETag when the table tells.
func (g *gate) write(ctx context.Context, etag, v string) error {
	etags, err := g.o.T.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: g.shard, IfMatch: etag,
		Props: table.Props{PropWakeBefore: v}}})
	if err == nil && len(etags) == 1 && etags[0] != "" {
		g.mu.Lock()
		g.etag = etags[0]
		g.mu.Unlock()
	}
	return err
}

// unpublish clears WakeBefore (the shard is polled again).
func (g *gate) unpublish(ctx context.Context) {
	g.mu.Lock()
	pub, etag := g.published, g.etag
	g.mu.Unlock()
	if pub.IsZero() {
		return
	}
	if g.write(ctx, etag, "") != nil {
		return // tried again after the next pass; clients wake us meanwhile
	}
	g.mu.Lock()
	g.published = time.Time{}
	g.mu.Unlock()
}

// Wake is what a schedule client calls after writing a row due at due into
// shard, given the map it holds (read at most ClientMapTTL ago): if the
// shard's owner has gone quiet and would not look before due, it writes a
// wake token into the shard's row (one request). It reports whether it
// woke the owner.
func Wake(ctx context.Context, t table.Table, m Map, shard string, due time.Time) (bool, error) {
	a, ok := m.Shards[shard]
	if !ok || a.WakeBefore.IsZero() || !due.Before(a.WakeBefore) {
		return false, nil
	}
	_, err := t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: shard,
		Props: table.Props{PropWake: randid.UUID()}}})
	if err != nil {
		return false, err
	}
	return true, nil
}

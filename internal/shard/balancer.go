package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
)

// Roster tells which instances are live. Live must be decided by storage
// (a lease in force), never by comparing clocks.
type Roster interface {
	Live(ctx context.Context) ([]string, error)
}

// Balancer shares the shards among the live instances. It runs on the
// traffic cop, for one lease term at a time.
type Balancer struct {
	T      table.Table
	Roster Roster
	// Count is the configured shard count, used when the map has never
	// been written (afterwards the map's count rules: SetCount).
	Count int
	// Cycle is the time between two looks at the roster.
	Cycle  time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
	// OnChange, if set, is told of every change written.
	OnChange func(Assignment)
	// RunParts, when above 0, is the run records' partition count before
	// the map recorded any (the runs package's default): the balancer
	// grows the count with the shards, to max(RunParts, the map's span),
	// through RunParts.Next (0: the map's RunParts are left alone).
	RunParts int
	// RunPartsFor is the count the fleet's work queues call for: the
	// balancer grows the count to it too (to max(RunParts, RunPartsFor,
	// the map's span)), so that a fleet whose records were first written
	// under fewer partitions reaches the count a fresh account starts
	// with (shard.SizeRuns).
	RunPartsFor int
	// Settle is how long a new run-record partition count is read before
	// it is written under. Default RunPartsSettle.
	Settle time.Duration

	// seenNext is the pending run-partition count this balancer last read
	// in the map (RunParts.Next), and seenAt when it first read it.
	seenNext int
	seenAt   time.Time
	// reopen says a write of the current count's open rows again (at a
	// term's first cycle or a change's end) failed: the next cycle tries
	// it again.
	reopen bool
}

// Run balances as generation gen until ctx ends (it then returns nil) or
// a newer balancer has written the map (ErrFenced). Errors of one cycle
// are logged and the cycle is tried again at the next.
func (b *Balancer) Run(ctx context.Context, gen int64) error {
	log := b.Logger.With("generation", gen)
	claimed := false
	for {
		err := b.cycle(ctx, gen, !claimed, log)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrFenced) {
			log.Warn("stopping shard balancing", "err", err)
			return err
		}
		if err != nil {
			log.Warn("shard balancing failed; trying again next cycle", "err", err)
		} else {
			claimed = true
		}
		if clock.Sleep(ctx, b.Clock, b.Cycle) != nil {
			return nil
		}
	}
}

// cycle looks once: the roster, the map, and the changes written. claim
// writes the map row even without a change (the first cycle of a term
// fences out earlier balancers).
func (b *Balancer) cycle(ctx context.Context, gen int64, claim bool, log *slog.Logger) error {
	live, err := b.Roster.Live(ctx)
	if err != nil {
		return fmt.Errorf("list the live instances: %w", err)
	}
	m, err := Read(ctx, b.T)
	if err != nil {
		return err
	}
	if m.Generation > gen {
		return fmt.Errorf("%w: it holds generation %d, ours is %d", ErrFenced, m.Generation, gen)
	}
	// The first sharded map has PrevCount 1: the tasks an unsharded fleet
	// placed in "00" get their pointers, as after any change of count.
	l := m.Layout(b.Count)
	finished := l.PrevCount != 0 && m.Count != 0 && allDone(m, l)
	if finished {
		l.PrevCount = 0
		log.Info("every shard's tasks are findable under the new shard count", "count", l.Count)
	}
	// A map of a release before the open rows (or none yet, or a count
	// set by one) gets them for its count before it names them. The
	// first cycle of a term and the end of a change write them again
	// (one already there stays): a walk of a previous release, which
	// knows nothing of them, may have deleted or moved one, and no walk
	// of this release deletes the current count's rows after its change
	// ended.
	opened := l.Count != 0 && (l.Open != l.Count || claim || finished || b.reopen)
	if opened {
		err := b.open(ctx, m, l.Count)
		switch {
		case err != nil && l.Open != l.Count:
			return err // the map may not name the count Open before its rows stand
		case err != nil:
			// The rows were written before the map named the count, and
			// this write only repairs what a walk of an earlier release
			// may have done: owners, fencing and the change's end go on,
			// and the next cycle tries again.
			log.Warn("writing the shard count's open rows again failed; trying again next cycle", "count", l.Count, "err", err)
			b.reopen, opened = true, false
		default:
			b.reopen = false
			l.Open = l.Count
		}
	}
	changes := Plan(m, Names(l.Span), live, gen, b.Clock.Now())
	rp, grown := b.runParts(m.Runs, l.Span)
	if len(changes) == 0 && !claim && !finished && !opened && m.Count != 0 && !grown {
		return nil
	}
	if err := write(ctx, b.T, m, gen, l, rp, changes); err != nil {
		return err
	}
	if grown {
		log.Info("run records' partitions", "written", rp.Written, "next", rp.Next)
	}
	for _, c := range changes {
		log.Info("shard given", "shard", c.Shard, "owner", c.Owner, "epoch", c.Epoch, "was", m.Shards[c.Shard].Owner)
		if b.OnChange != nil {
			b.OnChange(c)
		}
	}
	return nil
}

// open writes the open rows of count, which map m names (Reopen) or,
// for the first map, is about to (OpenRows).
func (b *Balancer) open(ctx context.Context, m Map, count int) error {
	if m.Count != count {
		return OpenRows(ctx, b.T, count, OpenToken())
	}
	for _, s := range Names(count) {
		if err := Reopen(ctx, b.T, s, count); err != nil {
			return err
		}
	}
	return nil
}

// runParts returns the run records' partition counts as they should be
// written, and whether that differs from cur: a span larger than every
// count becomes Next; a Next read for RunPartsSettle (on this balancer's
// clock) becomes the count written under.
func (b *Balancer) runParts(cur RunParts, span int) (RunParts, bool) {
	if b.RunParts <= 0 {
		return cur, false
	}
	now := b.Clock.Now()
	if cur.Next != b.seenNext {
		b.seenNext, b.seenAt = cur.Next, now
	}
	next := RunParts{Written: slices.Clone(cur.Written), Next: cur.Next}
	if len(next.Written) == 0 {
		next.Written = []int{b.RunParts}
	}
	want := max(b.RunParts, b.RunPartsFor, span)
	switch last := next.Written[len(next.Written)-1]; {
	case next.Next != 0 && want > next.Next:
		next.Next = want // a larger count supersedes a pending one: read from first too
	case next.Next != 0 && now.Sub(b.seenAt) >= cmp.Or(b.Settle, RunPartsSettle):
		next.Written, next.Next = append(next.Written, next.Next), 0
	case next.Next == 0 && want > last:
		next.Next = want
	}
	return next, !slices.Equal(next.Written, cur.Written) || next.Next != cur.Next
}

// allDone reports whether every shard of l's span has recorded Done for
// l.Count.
func allDone(m Map, l Layout) bool {
	for _, s := range Names(l.Span) {
		if m.Shards[s].Done != l.Count {
			return false
		}
	}
	return true
}

package shard

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
)

// Owner moves the shards the map gives to one instance: it reads the map
// every cycle, starts Move for each shard newly given to it (or given again
// under a new epoch) and stops the moves of shards taken from it.
type Owner struct {
	T table.Table
	// Member is this instance's member name, as the roster reports it.
	Member string
	Cycle  time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
	// Early is the movers' early window: a shard whose earliest row is
	// due later than this ahead may go quiet.
	Early time.Duration
	// NextDue returns the due time of a shard's earliest row (false: it
	// has none).
	NextDue func(ctx context.Context, shard string) (time.Time, bool, error)
	// SweepEvery is how often a quiet shard is swept (malformed rows no
	// due query reaches, unique guards no longer held): the movers'
	// schedule.MoverOptions.SweepEvery. A mover sweeps only
	// between passes, so a quiet shard whose round-robin look comes this
	// long after its last pass passes once, and its sweep runs. Zero: a
	// quiet shard is never swept.
	SweepEvery time.Duration
	// Move moves shard as its owner under epoch until ctx ends, pacing its
	// passes with pace (schedule.MoverOptions.Pace: busy reports that the
	// pass found rows due within Early, wait the mover's own wait); an
	// error (such as a fence refusing the epoch) ends that shard's moving
	// until the map gives it again under another epoch.
	Move func(ctx context.Context, shard string, epoch int64, pace func(ctx context.Context, busy bool, wait time.Duration) error) error
	// Point, while the shard count changes (Map.PrevCount), makes the
	// tasks of shard findable under count (writing pointers where their
	// ids now belong); the owner then records the shard done.
	Point func(ctx context.Context, shard string, count int) error
	// OnChange, if set, is told the shards moved after every change.
	OnChange func(owned []string)
	// OnRead, if set, is given every map read.
	OnRead func(Map)

	// all is every shard of the map as last read: apart from mu, since
	// a mover reads it (Shards) while apply, holding mu, waits for a
	// mover to stop (issue 38, sim seed 161778: a held-back mover read
	// it as its shard was taken away, and the two waited on each other).
	all atomic.Pointer[[]string]

	mu    sync.Mutex
	moves map[string]*move
	rr    string // the shard the last round-robin look went to
	// counts is when each shard count was first read from the map.
	counts   map[int]time.Time
	pointing map[string]bool // shards whose pointers are being written
}

// grace is how long a shard's owner keeps polling after publishing that
// it goes quiet.
func (o *Owner) grace() time.Duration { return max(2*o.Cycle, 2*ClientMapTTL) }

type move struct {
	gate   *gate
	epoch  int64
	since  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	ended  atomic.Bool // Move returned on its own (fenced or failed)
}

// Run reads the map every Cycle and keeps the moves in step with it until
// ctx ends; it then stops every move and returns when they have returned.
// A failed read keeps the moves as they are (storage fences them).
func (o *Owner) Run(ctx context.Context) error {
	o.mu.Lock()
	o.moves = map[string]*move{}
	o.mu.Unlock()
	defer o.stopAll()
	for {
		m, err := Read(ctx, o.T)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			o.Logger.Warn("cannot read the shard map; keeping the shards as they are", "err", err)
		} else {
			if o.OnRead != nil {
				o.OnRead(m)
			}
			all := slices.Sorted(maps.Keys(m.Shards))
			o.all.Store(&all)
			o.apply(ctx, m)
			o.look()
			o.point(ctx, m)
			// apply has stopped the moves of shards taken from us: tell
			// their new owners.
			for _, a := range m.Releasing(o.Member) {
				if err := letGo(ctx, o.T, a); err != nil && ctx.Err() == nil {
					o.Logger.Warn("cannot hand a shard over; trying again next cycle", "shard", a.Shard, "err", err)
				}
			}
		}
		if clock.Sleep(ctx, o.Clock, o.Cycle) != nil {
			return nil
		}
	}
}

// Shards returns every shard of the map as last read (nil before the
// first read), in order: the shards whose rows may hold tasks, whoever
// moves them. It never waits for the owner: a mover may call it while
// the owner waits for that mover to stop.
func (o *Owner) Shards() []string {
	all := o.all.Load()
	if all == nil {
		return nil
	}
	return slices.Clone(*all)
}

// Owned returns the shards this owner moves now, in order.
func (o *Owner) Owned() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.moves))
	for s, mv := range o.moves {
		if !mv.ended.Load() {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (o *Owner) apply(ctx context.Context, m Map) {
	mine := m.Owned(o.Member)
	o.mu.Lock()
	changed := false
	defer func() {
		o.mu.Unlock()
		if changed && o.OnChange != nil {
			o.OnChange(o.Owned())
		}
	}()
	for s, mv := range o.moves {
		if e, ok := mine[s]; !ok || e != mv.epoch {
			mv.cancel()
			<-mv.done
			delete(o.moves, s)
			changed = true
			o.Logger.Info("shard taken away", "shard", s, "epoch", mv.epoch)
		}
	}
	for s, e := range mine {
		if mv, ok := o.moves[s]; ok {
			mv.gate.seen(m.Shards[s])
			continue
		}
		mctx, cancel := context.WithCancel(ctx)
		mv := &move{gate: newGate(o, m.Shards[s]), epoch: e, since: o.Clock.Now(), cancel: cancel, done: make(chan struct{})}
		o.moves[s] = mv
		changed = true
		o.Logger.Info("moving shard", "shard", s, "epoch", e)
		go func() {
			defer close(mv.done)
			defer mv.ended.Store(true)
			if err := o.Move(mctx, s, e, mv.gate.Pace); err != nil && !errors.Is(err, context.Canceled) && mctx.Err() == nil {
				o.Logger.Warn("stopped moving shard", "shard", s, "epoch", e, "err", err)
			}
		}()
	}
}

// look gives the next quiet shard (in shard order, round robin) a look at
// its earliest row: one query a cycle, however many shards are quiet, so
// that rows written without a wake (by other languages) are found within
// (quiet shards) × Cycle.
func (o *Owner) look() {
	o.mu.Lock()
	defer o.mu.Unlock()
	var quiet []string
	for s, mv := range o.moves {
		if mv.gate.isQuiet() {
			quiet = append(quiet, s)
		}
	}
	if len(quiet) == 0 {
		return
	}
	sort.Strings(quiet)
	next := quiet[0]
	for _, s := range quiet {
		if s > o.rr {
			next = s
			break
		}
	}
	o.rr = next
	o.moves[next].gate.poke()
}

// point starts, for each shard this owner moves that is not done for the
// map's count, the writing of its pointers — once every client can have
// read the new count (two ClientMapTTL after this owner first read it,
// and UnshardedMapTTL more when the schedule was unsharded), so that no
// task is placed by the old count after the walk.
func (o *Owner) point(ctx context.Context, m Map) {
	if m.PrevCount == 0 || o.Point == nil {
		return
	}
	now := o.Clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts, o.pointing = map[int]time.Time{}, map[string]bool{}
	}
	first, ok := o.counts[m.Count]
	if !ok {
		o.counts[m.Count] = now
		return
	}
	wait := 2 * ClientMapTTL
	if m.PrevCount == 1 {
		// Sharding an unsharded schedule: processes still on one shard
		// learn of the map within UnshardedMapTTL.
		wait += UnshardedMapTTL
	}
	if now.Sub(first) < wait {
		return
	}
	for s, mv := range o.moves {
		a := m.Shards[s]
		if mv.ended.Load() || a.Done == m.Count || o.pointing[s] {
			continue
		}
		o.pointing[s] = true
		go func() {
			defer func() {
				o.mu.Lock()
				delete(o.pointing, s)
				o.mu.Unlock()
			}()
			err := o.Point(ctx, s, m.Count)
			if err == nil {
				err = markDone(ctx, o.T, a, m.Count)
			}
			if err != nil && ctx.Err() == nil {
				o.Logger.Warn("cannot make a shard's tasks findable under the new shard count yet; trying again next cycle", "shard", s, "count", m.Count, "err", err)
				return
			}
			o.Logger.Info("shard's tasks findable under the new shard count", "shard", s, "count", m.Count)
		}()
	}
}

func (o *Owner) stopAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	var stopped []string
	for s, mv := range o.moves {
		mv.cancel()
		<-mv.done
		delete(o.moves, s)
		stopped = append(stopped, s)
	}
	if len(stopped) > 0 {
		sort.Strings(stopped)
		o.Logger.Info("stopped moving shards", "shards", stopped)
	}
}

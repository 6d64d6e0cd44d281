package leasecron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// runLayout is how the run records are spread over partitions
// (runs.Layout), as the shard map last said: the count grows with the
// shards (docs/run-history.md). A sharded worker's shard owner tells it
// every map read; until then, and in a sharded client, it reads the map
// itself at most once per shard.ClientMapTTL.
//
// A process that is not sharded reads it too (issue 38: a worker still on
// one shard in the middle of the rolling switch to sharding must find the
// records sharded workers write under a grown count), but lazily: it
// starts from the default layout, which every record of an unsharded
// fleet is under, and reads the map only when a lookup misses, before a
// listing and before a blind insert (a claim, a queued mark: refresh), at
// most once per unshardedLayoutTTL — so a busy unsharded worker reads it
// up to twice a minute, an idle one never. So `status` stays one point read
// in an unsharded fleet. Its own new records go under the default count,
// where every process looks too (a count once used is read for good).
type runLayout struct {
	t    table.Table // the schedule table, where the map lives
	clk  clock.Clock
	ttl  time.Duration
	lazy bool

	mu   sync.Mutex
	l    runs.Layout
	at   time.Time // when l was read (zero: never)
	told bool      // an owner keeps l current
}

// unshardedLayoutTTL is how long a process that is not sharded trusts the
// layout it read after a miss: a quarter of shard.RunPartsSettle.
const unshardedLayoutTTL = shard.RunPartsSettle / 4

func newRunLayout(t table.Table, clk clock.Clock, sharded bool) *runLayout {
	r := &runLayout{t: t, clk: clk, ttl: shard.ClientMapTTL, l: runs.DefaultLayout}
	if !sharded {
		r.ttl, r.lazy = unshardedLayoutTTL, true
	}
	return r
}

// get is runs.Options.Layout.
func (r *runLayout) get(ctx context.Context) runs.Layout {
	r.mu.Lock()
	l, lazy := r.l, r.lazy && r.at.IsZero()
	r.mu.Unlock()
	if lazy {
		return l // until a miss asks for the map
	}
	l, _ = r.read(ctx)
	return l
}

// refresh is runs.Options.Refresh: read the map unless it was read within
// the ttl, and report whether the layout now reads partitions it did not.
func (r *runLayout) refresh(ctx context.Context) bool {
	r.mu.Lock()
	before := r.l
	r.mu.Unlock()
	after, _ := r.read(ctx)
	for _, n := range after.Read {
		if !containsInt(before.Read, n) {
			return true
		}
	}
	return false
}

// read returns the layout, reading the map when what is held is older
// than the ttl (fresh reports that nothing was read).
func (r *runLayout) read(ctx context.Context) (l runs.Layout, fresh bool) {
	now := r.clk.Now()
	r.mu.Lock()
	l, fresh = r.l, r.told || !r.at.IsZero() && now.Sub(r.at) < r.ttl
	r.mu.Unlock()
	if fresh {
		return l, true
	}
	m, err := shard.Read(ctx, r.t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && !r.told {
		r.l = layoutOf(m)
		if len(m.Runs.Written) > 0 || m.Runs.Next != 0 {
			r.at = now
		}
		// A map that records no count yet is not trusted for the ttl: a
		// worker records one before it creates the run-records table on
		// a fresh account (sizeRuns), and a process that kept "none" for
		// the ttl could write its first records under the default while
		// the others look under the recorded count. Every worker of this
		// release records one at start, so the extra reads last only
		// until the first of them has started.
	}
	// Otherwise the last one read: a failed read is tried again at the
	// next call, as a failed write is retried.
	return r.l, false
}

// tell is shard.Owner.OnRead.
func (r *runLayout) tell(m shard.Map) {
	r.mu.Lock()
	r.l, r.told = layoutOf(m), true
	r.mu.Unlock()
}

// maxRunParts caps runPartsFor: a listing of run records reads every
// partition once per page.
const maxRunParts = 64

// runPartsFor is how many partitions the run records of a fleet with
// queues work queues are spread over from the start: four per queue
// (at least runs.Buckets, at most maxRunParts). A task costs about 8
// entity operations in the run records against about 2.5 message
// requests in its queue (docs/BENCHMARKS.md, section 13), and Azure
// gives a partition and a queue the same target (about 2,000 a second),
// so at four partitions a queue the queues, not the records, are reached
// first.
func runPartsFor(queues int) int {
	return min(max(runs.Buckets, 4*queues), maxRunParts)
}

// sizeRuns records, before the worker creates the run-records table, how
// many partitions records are written under (shard.SizeRuns) when the
// map records none yet: runPartsFor the work queues on a fresh account
// (the table does not exist, so no record is anywhere), the runs
// package's default when the table exists (records written by an earlier
// release, or by a fleet that never recorded it, are all under it).
// Afterwards the count grows with the fleet through the balancer, with
// RunPartsSettle between reading a count and writing under it.
func (w *Worker) sizeRuns(ctx context.Context) error {
	rt, err := table.NewAzure(w.sc.Table, w.o.Names.RunsTable)
	if err != nil {
		return err
	}
	n, fresh := runs.Buckets, false
	switch _, err := rt.Get(ctx, "~", "~"); {
	case errors.Is(err, storage.ErrTableNotFound):
		n, fresh = runPartsFor(w.o.Names.Queues), true
	case err == nil || errors.Is(err, storage.ErrNotFound):
	default:
		return fmt.Errorf("look for table %s: %w", w.o.Names.RunsTable, err)
	}
	rp, err := shard.SizeRuns(ctx, w.shardMap, n)
	if err != nil {
		return err
	}
	if fresh {
		w.log.Info("run records' partitions sized for the fleet", "partitions", rp.Written, "queues", w.o.Names.Queues)
	}
	return nil
}

func layoutOf(m shard.Map) runs.Layout {
	w, rd := m.Runs.Layout(runs.Buckets)
	return runs.Layout{Write: w, Read: rd}
}

func containsInt(s []int, n int) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

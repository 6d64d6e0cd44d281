package leasecron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// runLayout is how the run records are spread over partitions
// (runs.Layout), as the shard map last said: the count is sized for the
// fleet when the table is created (size) and grows with the shards
// (docs/run-history.md). A sharded worker's shard owner tells it every
// map read; until then, and in a sharded client, it reads the map itself
// at most once per shard.ClientMapTTL.
//
// A process that is not sharded reads it too (issue 38: a worker still on
// one shard in the middle of the rolling switch to sharding must find the
// records sharded workers write under a grown count), but lazily: it
// starts from the default layout for its point reads, and reads the map
// when a lookup misses, before a listing and before a blind insert (a
// claim, a queued mark: refresh), at most once per unshardedLayoutTTL —
// so a busy unsharded worker reads it up to twice a minute, an idle one
// rarely. So `status` stays one point read in an unsharded fleet of one
// queue, where the default is the count (and one read more for a run
// whose home under a larger count differs). No write goes where the map
// was not read: a refresh that cannot read a map never read fails.
type runLayout struct {
	t         table.Table // the schedule table, where the map lives
	runsTable table.Table // the run records' table (size looks for it)
	names     Names       // the process's shards and work queues
	clk       clock.Clock
	log       *slog.Logger
	ttl       time.Duration
	lazy      bool

	mu    sync.Mutex
	l     runs.Layout
	at    time.Time // when l was read (zero: never, or the map recorded no count)
	told  bool      // an owner keeps l current
	known bool      // l was read from the map or told at least once
	sized bool      // size has recorded the count (a worker's, at start)
}

// unshardedLayoutTTL is how long a process that is not sharded trusts the
// layout it read after a miss: a quarter of shard.RunPartsSettle.
const unshardedLayoutTTL = shard.RunPartsSettle / 4

func newRunLayout(t, runsTable table.Table, n Names, clk clock.Clock, log *slog.Logger) *runLayout {
	sharded := n.Shards > 1
	r := &runLayout{t: t, runsTable: runsTable, names: n, clk: clk, log: log, ttl: shard.ClientMapTTL, l: runs.DefaultLayout}
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
// It fails when the map has never been read and cannot be now: the
// default is not a safe guess on an account whose first process recorded
// more partitions (size), so a blind insert or a write after a miss
// waits for a read instead.
func (r *runLayout) refresh(ctx context.Context) (bool, error) {
	r.mu.Lock()
	before := r.l
	r.mu.Unlock()
	after, err := r.read(ctx)
	if err != nil {
		return false, err
	}
	for _, n := range after.Read {
		if !containsInt(before.Read, n) {
			return true, nil
		}
	}
	return false, nil
}

// read returns the layout, reading the map when what is held is older
// than the ttl. A failed read returns the last layout read, and an error
// only when there is none.
func (r *runLayout) read(ctx context.Context) (runs.Layout, error) {
	now := r.clk.Now()
	r.mu.Lock()
	l, fresh := r.l, r.told || !r.at.IsZero() && now.Sub(r.at) < r.ttl
	r.mu.Unlock()
	if fresh {
		return l, nil
	}
	m, err := shard.Read(ctx, r.t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && !r.known {
		return r.l, fmt.Errorf("read the shard map for the run records' partitions: %w", err)
	}
	if err == nil && !r.told {
		r.known = true
		r.l = layoutOf(m)
		if len(m.Runs.Written) > 0 || m.Runs.Next != 0 {
			r.at = now
		}
		// A map that records no count yet is not trusted for the ttl: a
		// process records one before it creates the run-records table on
		// a fresh account (size), and a process that kept "none" for
		// the ttl could write its first records under the default while
		// the others look under the recorded count. Every worker of this
		// release records one at start, so the extra reads last only
		// until the first of them has started.
	}
	// Otherwise the last one read: a failed read is tried again at the
	// next call, as a failed write is retried.
	return r.l, nil
}

// tell is shard.Owner.OnRead.
func (r *runLayout) tell(m shard.Map) {
	r.mu.Lock()
	r.l, r.told, r.known = layoutOf(m), true, true
	r.mu.Unlock()
}

// maxRunParts caps runPartsFor: a listing of run records reads every
// partition once per page.
const maxRunParts = 64

// runPartsFor is how many partitions the run records of a fleet of n's
// shards and work queues are spread over from the start: runs.Buckets
// (four) with one queue or unsharded, eight per queue for a sharded fleet
// of more (at most maxRunParts); a sharded fleet's balancer grows it
// further to the largest shard count. A task costs about ten entity
// operations in the run records against two to three message requests
// in its queue and about two entity operations in its schedule
// partition (docs/BENCHMARKS.md, section 13), and Azure gives a
// partition and a queue the same target (about 2,000 a second): at four
// partitions a queue the records reached their targets a little before
// the queues, and the bursts of a partition's grouped claims and finishes
// were refused first; at eight a partition carries about 1.25 operations
// a task against its queue's two to three, so the queues bind first.
// Four partitions carry about 800 tasks a second, about what one queue
// (650-900) or one schedule partition (about 900) does: so a fleet of one
// queue, or an unsharded one, whose tasks all pass through one schedule
// partition, keeps four, and a page of run history stays within five
// requests; a fleet that needs more shards and grows its queues. Past
// eight queues the cap holds W at 64, where the account's request target
// (about 20,000 a second: some 2,000 tasks at about ten requests each)
// binds before the records do (2,000 × 10 ÷ 64 ≈ 310 a second a
// partition).
func runPartsFor(n Names) int {
	if n.Shards <= 1 || n.Queues <= 1 {
		return runs.Buckets
	}
	return min(8*n.Queues, maxRunParts)
}

// size records, before the run-records table is created, how many
// partitions records are written under (shard.SizeRuns) when the map
// records none yet: runPartsFor the process's shards and queues on a fresh
// account (the table does not exist, so no record is anywhere), the runs
// package's default when the table exists (records written by an earlier
// release, or by a fleet that never recorded it, are all under it).
// Afterwards the count grows with the fleet through the balancer, with
// RunPartsSettle between reading a count and writing under it. Every
// process that creates the table calls it first, a worker at start and
// any process at its first use of run records (runs.Options.Prepare), so
// no process of this release creates the table before the count is
// recorded. recordExisting (a worker) records the default for a table
// that exists without a recorded count, so that the map always records
// one once a worker of this release has started (runLayout.read keeps no
// map without one).
func (r *runLayout) size(ctx context.Context, recordExisting bool) error {
	r.mu.Lock()
	sized := r.sized
	r.mu.Unlock()
	if sized {
		// A worker sized it at start; its runs store's first use (Prepare)
		// need not look for the table again.
		return nil
	}
	n, fresh := runs.Buckets, false
	switch _, err := r.runsTable.Get(ctx, "~", "~"); {
	case errors.Is(err, storage.ErrTableNotFound):
		n, fresh = runPartsFor(r.names), true
	case err == nil || errors.Is(err, storage.ErrNotFound):
		if !recordExisting {
			// The table exists: its count is recorded, or it is the
			// default, which a worker records at its start. A client
			// pays one read for this, once.
			return nil
		}
	default:
		return fmt.Errorf("look for the run-records table: %w", err)
	}
	if fresh {
		// The map lives in the schedule table, which a client's first
		// use of run records may come before.
		if err := r.t.Create(ctx); err != nil {
			return fmt.Errorf("create the schedule table for the shard map: %w", err)
		}
	}
	rp, err := shard.SizeRuns(ctx, r.t, n)
	if err != nil {
		return err
	}
	if fresh {
		r.log.Info("run records' partitions sized for the fleet", "partitions", rp.Written, "queues", r.names.Queues, "shards", r.names.Shards)
	}
	r.mu.Lock()
	r.sized = true
	r.mu.Unlock()
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

package leasecron

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// failingQueries is a table whose queries fail while fail is set.
type failingQueries struct {
	table.Table
	fail atomic.Bool
}

func (f *failingQueries) Query(ctx context.Context, q table.Query) (table.Page, error) {
	if f.fail.Load() {
		return table.Page{}, storage.ErrServerBusy
	}
	return f.Table.Query(ctx, q)
}

// uncreated is a table that reads as missing until it is created (the
// memory table always exists).
type uncreated struct {
	table.Table
	created atomic.Bool
}

func (u *uncreated) Create(ctx context.Context) error {
	u.created.Store(true)
	return u.Table.Create(ctx)
}

func (u *uncreated) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	if !u.created.Load() {
		return table.Entity{}, storage.ErrTableNotFound
	}
	return u.Table.Get(ctx, pk, rk)
}

func testRunLayout(t *testing.T, sharded bool, queues int) (*runLayout, *failingQueries, table.Table, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sched := &failingQueries{Table: table.NewMemory("ScheduledItems", clk)}
	runsT := &uncreated{Table: table.NewMemory("Runs", clk)}
	n := Names{Shards: 1, Queues: queues}
	if sharded {
		n.Shards = 4
	}
	return newRunLayout(sched, runsT, n, clk, slog.New(slog.DiscardHandler)), sched, runsT, clk
}

// TestRunLayoutDoesNotKeepAMapWithoutACount (issue 41): a process that read
// the map before the first worker recorded the run records' count (on a
// fresh account, just before it creates their table) reads it again at
// its next write instead of writing under the default for the ttl, while
// a recorded count is kept for the ttl as before.
func TestRunLayoutDoesNotKeepAMapWithoutACount(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		ctx := context.Background()
		r, sched, _, clk := testRunLayout(t, sharded, 1)
		if _, err := r.refresh(ctx); err != nil { // before anything is recorded: the default
			t.Fatal(err)
		}
		if l := r.get(ctx); l.Write != runs.Buckets {
			t.Fatalf("sharded %v: before a count is recorded: %+v; want the default", sharded, l)
		}
		if _, err := shard.SizeRuns(ctx, sched, 16); err != nil {
			t.Fatal(err)
		}
		if grew, err := r.refresh(ctx); err != nil || !grew {
			t.Fatalf("sharded %v: a refresh right after the count was recorded: %v, %v; want it read", sharded, grew, err)
		}
		if l := r.get(ctx); l.Write != 16 || !slices.Equal(l.Read, []int{16}) {
			t.Fatalf("sharded %v: after the count was recorded: %+v; want 16", sharded, l)
		}
		// A recorded count is kept for the ttl: a change within it is
		// not read (the settling covers it).
		if _, err := sched.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: shard.Partition, RowKey: shard.MapRow,
			Props: table.Props{shard.PropRunPartsNext: int64(32)}}}); err != nil {
			t.Fatal(err)
		}
		if grew, _ := r.refresh(ctx); grew {
			t.Fatalf("sharded %v: a count kept for its ttl was read again at once", sharded)
		}
		clk.Advance(r.ttl)
		if grew, err := r.refresh(ctx); err != nil || !grew || !slices.Equal(r.get(ctx).Read, []int{16, 32}) {
			t.Fatalf("sharded %v: after the ttl: %+v, %v; want 32 read too", sharded, r.get(ctx), err)
		}
	}
}

// TestRunLayoutRefusesToGuess (issue 41, a review): a process that has
// never read the map and cannot read it now does not fall back to the
// default for a write, since on a fresh account the first worker may have
// recorded more partitions; once it has read the map, a failed read keeps
// what it read.
func TestRunLayoutRefusesToGuess(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		ctx := context.Background()
		r, sched, _, clk := testRunLayout(t, sharded, 4)
		if _, err := shard.SizeRuns(ctx, sched, 16); err != nil {
			t.Fatal(err)
		}
		sched.fail.Store(true)
		if _, err := r.refresh(ctx); !errors.Is(err, storage.ErrServerBusy) {
			t.Fatalf("sharded %v: a refresh that cannot read a map never read: %v; want the read's error", sharded, err)
		}
		sched.fail.Store(false)
		if _, err := r.refresh(ctx); err != nil || r.get(ctx).Write != 16 {
			t.Fatalf("sharded %v: once readable: %+v, %v; want 16", sharded, r.get(ctx), err)
		}
		sched.fail.Store(true)
		clk.Advance(r.ttl)
		if _, err := r.refresh(ctx); err != nil || r.get(ctx).Write != 16 {
			t.Fatalf("sharded %v: a failed read after a good one: %+v, %v; want 16 kept", sharded, r.get(ctx), err)
		}
	}
}

// TestRunLayoutSize: the count is sized for the process's shards and
// queues when the run-records table does not exist yet (sharded, eight a
// queue with more than one, at most 64; four otherwise), the default
// when it does, and a count already recorded is kept.
func TestRunLayoutSize(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		sharded bool
		queues  int
		exists  bool
		want    int
	}{
		{true, 1, false, 4}, {true, 2, false, 16}, {true, 4, false, 32}, {true, 3, false, 24}, {true, 8, false, 64}, {true, 40, false, 64},
		{true, 4, true, 4},
		// Unsharded, every task passes through one schedule partition,
		// which four record partitions match.
		{false, 1, false, 4}, {false, 4, false, 4},
	} {
		r, sched, runsT, _ := testRunLayout(t, c.sharded, c.queues)
		if c.exists {
			if err := runsT.Create(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if c.exists {
			// A client leaves an existing table's count to the workers.
			if err := r.size(ctx, false); err != nil {
				t.Fatal(err)
			}
			if m, _ := shard.Read(ctx, sched); len(m.Runs.Written) != 0 {
				t.Errorf("a client recorded %v for a table that exists", m.Runs.Written)
			}
		}
		if err := r.size(ctx, true); err != nil {
			t.Fatal(err)
		}
		m, err := shard.Read(ctx, sched)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.Runs.Written, []int{c.want}) {
			t.Errorf("sharded %v, %d queues, table exists %v: recorded %v; want [%d]", c.sharded, c.queues, c.exists, m.Runs.Written, c.want)
		}
		// A second process of another size keeps what was recorded.
		r2 := newRunLayout(sched, runsT, Names{Shards: 8, Queues: 16}, clock.Real{}, slog.New(slog.DiscardHandler))
		if err := r2.size(ctx, true); err != nil {
			t.Fatal(err)
		}
		if m, _ := shard.Read(ctx, sched); !slices.Equal(m.Runs.Written, []int{c.want}) {
			t.Errorf("%d queues: a later process changed the count to %v", c.queues, m.Runs.Written)
		}
	}
}

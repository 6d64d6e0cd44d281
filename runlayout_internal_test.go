package leasecron

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/table"
)

// TestRunLayoutDoesNotKeepAMapWithoutACount (issue 41): a process that read
// the map before the first worker recorded the run records' count (on a
// fresh account, just before it creates their table) reads it again at
// its next write instead of writing under the default for the ttl, while
// a recorded count is kept for the ttl as before.
func TestRunLayoutDoesNotKeepAMapWithoutACount(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		tb := table.NewMemory("ScheduledItems", clk)
		r := newRunLayout(tb, clk, sharded)
		r.refresh(ctx) // before anything is recorded: the default
		if l := r.get(ctx); l.Write != runs.Buckets {
			t.Fatalf("sharded %v: before a count is recorded: %+v; want the default", sharded, l)
		}
		if _, err := shard.SizeRuns(ctx, tb, 16); err != nil {
			t.Fatal(err)
		}
		if !r.refresh(ctx) {
			t.Fatalf("sharded %v: a refresh right after the count was recorded did not read it", sharded)
		}
		if l := r.get(ctx); l.Write != 16 || !slices.Equal(l.Read, []int{16}) {
			t.Fatalf("sharded %v: after the count was recorded: %+v; want 16", sharded, l)
		}
		// A recorded count is kept for the ttl: a change within it is
		// not read (the settling covers it).
		if _, err := tb.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: shard.Partition, RowKey: shard.MapRow,
			Props: table.Props{shard.PropRunPartsNext: int64(32)}}}); err != nil {
			t.Fatal(err)
		}
		if r.refresh(ctx) {
			t.Fatalf("sharded %v: a count kept for its ttl was read again at once", sharded)
		}
		clk.Advance(r.ttl)
		if !r.refresh(ctx) || !slices.Equal(r.get(ctx).Read, []int{16, 32}) {
			t.Fatalf("sharded %v: after the ttl: %+v; want 32 read too", sharded, r.get(ctx))
		}
	}
}

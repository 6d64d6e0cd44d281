package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// twoShards is a schedule of 2 shards with no change under way, and a
// client placing by its map.
func twoShards(t *testing.T) (table.Table, *clock.Fake, Options) {
	t.Helper()
	mt := table.NewMemory("", nil)
	fc := clock.NewFake(t0)
	settledMap(t, mt, fc, 2)
	return mt, fc, Options{Shards: []string{"00", "01"}, ShardMap: true, Clock: fc, Logger: quiet}
}

// changeCount sets the count from prev to count and walks every shard.
func changeCount(t *testing.T, mt table.Table, fc *clock.Fake, o Options, prev, count int) {
	t.Helper()
	if _, err := shard.SetCount(ctx(t), mt, count); err != nil {
		t.Fatal(err)
	}
	fc.Advance(2 * time.Second)
	endChange(t, mt, o, prev, count)
	fc.Advance(2 * time.Second)
}

// A walk that lands after its change ended — its owner paused through
// the rest of the change and the start of the next — leaves the next
// count's open rows standing: deleted, they would close their shards to
// every unique take (issue 38, a review of the open rows).
func TestAWalkLandingAfterItsChangeEndedLeavesTheNextCountsOpenRows(t *testing.T) {
	mt, fc, o := twoShards(t)
	changeCount(t, mt, fc, o, 2, 8)
	if _, err := shard.SetCount(ctx(t), mt, 4); err != nil {
		t.Fatal(err)
	}
	walker, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := walker.Point(ctx(t), "00", 8); err != nil { // the late walk
		t.Fatal(err)
	}
	if _, err := mt.Get(ctx(t), "00", shard.OpenRowKey(4)); err != nil {
		t.Fatalf("open row of 4 in shard 00 after a late walk for 8: %v; want it standing", err)
	}
	fc.Advance(shard.ClientMapTTL)
	c, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	for i := range 16 {
		if _, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: "k" + string(rune('a'+i))}, live, AddOptions{}); err != nil {
			t.Fatalf("a unique take under 4 shards after the late walk: %v", err)
		}
	}
}

// mergeFirst is a table whose first conditional delete of an open row
// has a take placed by that row's count merge into it just before: the
// walk's delete finds the row changed since it read it.
type mergeFirst struct {
	table.Table
	once sync.Once
}

func (m *mergeFirst) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if op := ops[0]; op.Kind == table.Delete && strings.HasPrefix(op.RowKey, shard.OpenRowPrefix) {
		m.once.Do(func() {
			_, _ = m.Table.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: op.PartitionKey, RowKey: op.RowKey, Props: table.Props{}}})
		})
	}
	return m.Table.Submit(ctx, ops)
}

// A take placed by the old count that commits between the walk's read of
// the open rows and its delete changes the row's ETag; the walk reads it
// again and deletes it, rather than leaving the shard open to the old
// count (issue 38, a review of the open rows).
func TestAWalkDeletesAnOpenRowATakeChangedAfterItWasRead(t *testing.T) {
	mt, _, o := twoShards(t)
	if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
		t.Fatal(err)
	}
	walker, err := newClient(&mergeFirst{Table: mt}, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := walker.Point(ctx(t), "00", 8); err != nil {
		t.Fatal(err)
	}
	if e, err := mt.Get(ctx(t), "00", shard.OpenRowKey(2)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("open row of 2 in shard 00 after the walk for 8: %v, %v; want it deleted", e.Props, err)
	}
}

// An open row missing while the map names its count open with no change
// under way (deleted by a walk of an earlier release, which knows nothing
// of open rows) is written again by the take that misses it, which then
// succeeds, rather than every take in its shard failing until the next
// leader's term (issue 38, a review of the open rows).
func TestATakeMissingTheOpenRowOfTheCurrentCountWritesItAgain(t *testing.T) {
	mt, _, o := twoShards(t)
	for _, s := range shard.Names(2) {
		if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: s, RowKey: shard.OpenRowKey(2)}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	it, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: "k"}, live, AddOptions{})
	if err != nil {
		t.Fatalf("a unique take whose shard lost its open row: %v; want it placed", err)
	}
	if _, err := mt.Get(ctx(t), it.Shard, shard.OpenRowKey(2)); err != nil {
		t.Fatalf("open row of 2 in shard %s after the take: %v; want it written again", it.Shard, err)
	}
}

// A unique take of a process still on one shard whose request lands after
// the walk of "00" under the first map — the switch to sharding done, and
// the key taken under the new count — finds "00" closed to takes placed
// by one shard and places itself again by the map, where the holder
// refuses it (issue 38, a review of the open rows: the switch from one
// shard had no open row, so such a take held its key beside the holder).
func TestATakeOfAnUnshardedProcessLandingAfterTheSwitchIsPlacedAgain(t *testing.T) {
	mt := table.NewMemory("", nil)
	fc := clock.NewFake(t0)
	one := Options{Shards: []string{"00"}, ShardMap: true, Clock: fc, Logger: quiet}
	eight := Options{Shards: shard.Names(8), ShardMap: true, Clock: fc, Logger: quiet}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	first, err := newClient(mt, one)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: "first"}, live, AddOptions{}); err != nil {
		t.Fatalf("the first unique take of an unsharded schedule: %v", err)
	}
	if _, err := mt.Get(ctx(t), "00", shard.OpenRowKey(1)); err != nil {
		t.Fatalf("open row of one shard after the first take: %v; want it written", err)
	}
	var key string
	for i := 0; ; i++ {
		if key = "k" + string(rune('a'+i)); table.Numbered("", 8, 2).Of("t~"+key) != "00" {
			break
		}
	}
	u := Unique{Key: key}
	var holder Item
	lt := &lateTable{Table: mt}
	lt.before = func() {
		writeFirstMap(t, mt, fc, 8)
		fc.Advance(shard.UnshardedMapTTL + 2*shard.ClientMapTTL)
		endChange(t, mt, eight, 1, 8)
		fresh, err := newClient(mt, eight)
		if err != nil {
			t.Fatal(err)
		}
		if holder, err = fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); err != nil {
			t.Fatalf("take under 8 shards after the switch: %v", err)
		}
	}
	stale, err := newClient(lt, one)
	if err != nil {
		t.Fatal(err)
	}
	var de *DuplicateError
	if late, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); !errors.As(err, &de) || de.ID != holder.ID {
		t.Fatalf("a take placed by one shard landing after the switch: %v (task %s in shard %s); want refused, naming %s", err, late.ID, late.Shard, holder.ID)
	}
	if e, err := mt.Get(ctx(t), "00", guardKey("t", key)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the late take left a guard in shard 00: %v, %v", e.Props, err)
	}
}

// mapUnreadable is a table whose reads of the shard map fail once down
// is set, and which counts the open rows inserted through it.
type mapUnreadable struct {
	table.Table
	down    bool
	inserts int
}

func (m *mapUnreadable) Query(ctx context.Context, q table.Query) (table.Page, error) {
	if m.down && q.Partition == shard.Partition {
		return table.Page{}, storage.ErrServerBusy
	}
	return m.Table.Query(ctx, q)
}

func (m *mapUnreadable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if op := ops[0]; op.Kind == table.Insert && strings.HasPrefix(op.RowKey, shard.OpenRowPrefix) {
		m.inserts++
	}
	return m.Table.Submit(ctx, ops)
}

// A take that finds its open row gone while it cannot read the map writes
// no row again: the map it read before names a count the fleet may have
// left, and that count's row written again would let its takes commit
// beside the key's holder under the new count (issue 38, a third review
// of the open rows: the map read before was used when a fresh read
// failed).
func TestATakeThatCannotReadTheMapWritesNoOpenRow(t *testing.T) {
	mt, fc, o := twoShards(t)
	mu := &mapUnreadable{Table: mt}
	stale, err := newClient(mu, o)
	if err != nil {
		t.Fatal(err)
	}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	if _, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: "before"}, live, AddOptions{}); err != nil {
		t.Fatal(err) // reads the map of 2
	}
	changeCount(t, mt, fc, o, 2, 8)
	mu.down = true
	if _, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: "after"}, live, AddOptions{}); err == nil {
		t.Fatal("a take placed by 2 shards after the change to 8, the map unreadable, succeeded")
	}
	if mu.inserts != 0 {
		t.Fatalf("the take wrote %d open rows again with the map unreadable; want none", mu.inserts)
	}
	for _, s := range shard.Names(2) {
		if _, err := mt.Get(ctx(t), s, shard.OpenRowKey(2)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("open row of 2 in shard %s after the change to 8: %v; want it gone", s, err)
		}
	}
}

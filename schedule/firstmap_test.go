package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

type oneMember struct{}

func (oneMember) Live(context.Context) ([]string, error) { return []string{"w1"}, nil }

// writeFirstMap writes the first sharded map, of count shards, as the
// first sharded worker to lead does.
func writeFirstMap(t *testing.T, mt table.Table, fc *clock.Fake, count int) {
	t.Helper()
	b := &shard.Balancer{T: mt, Roster: oneMember{}, Count: count, Cycle: time.Hour, Clock: fc, Logger: quiet}
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- b.Run(c, 1) }()
	for {
		if m, err := shard.Read(ctx(t), mt); err == nil && m.Count == count {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// In the first seconds of a switch to sharding, two clients still on one
// shard may hold two views of the map: one read "none" up to
// shard.UnshardedMapTTL ago, the other the new map. A task the second
// places by the new count is found by the first (its miss reads the map
// again), and a unique key the second holds refuses the first's task
// (issue 38, the simulator's seed 6835).
func TestFirstShardMapReachesClientsThatFoundNone(t *testing.T) {
	mt := table.NewMemory("", nil)
	fc := clock.NewFake(t0)
	o := Options{Shards: []string{"00"}, ShardMap: true, Clock: fc, Logger: quiet}
	stale, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Get(ctx(t), "nothing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup before any task: %v", err)
	}
	writeFirstMap(t, mt, fc, 4)
	fc.Advance(2 * time.Second)

	// An id placed outside "00" under four shards.
	var id string
	for i := 0; ; i++ {
		if id = fmt.Sprintf("t%d", i); table.Numbered("", 4, 2).Of(id) != "00" {
			break
		}
	}
	if _, err := fresh.Add(ctx(t), Item{ID: id, Type: "t", Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := stale.Get(ctx(t), id); err != nil || got.ID != id {
		t.Fatalf("lookup of %s, placed by a client that read the new map: %+v, %v", id, got, err)
	}

	// A unique key held by the fresh client's task.
	stale2, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale2.Get(ctx(t), "nothing"); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	// (stale2 read the map just now: take it back to "none" read 2 s ago.)
	stale2.maps.mu.Lock()
	stale2.maps.m, stale2.maps.at = shard.Map{}, fc.Now().Add(-2*time.Second)
	stale2.maps.mu.Unlock()
	u := Unique{Key: "k", For: time.Hour}
	var key string
	for i := 0; ; i++ {
		if key = fmt.Sprintf("k%d", i); table.Numbered("", 4, 2).Of("t~"+key) != "00" {
			break
		}
	}
	u.Key = key
	if _, err := fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, holds(true), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	var de *DuplicateError
	if _, err := stale2.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, holds(true), AddOptions{}); !errors.As(err, &de) {
		t.Fatalf("a second task of key %s by a client that found no map 2 s ago: %v; want refused as a duplicate", key, err)
	}
	// So is a requeue's retaking of the key (Retake).
	stale2.maps.mu.Lock()
	stale2.maps.m, stale2.maps.at = shard.Map{}, fc.Now().Add(-2*time.Second)
	stale2.maps.mu.Unlock()
	if err := stale2.Retake(ctx(t), "t", key, "requeued", "", Unique{}, holds(true)); !errors.As(err, &de) {
		t.Fatalf("a requeue retaking key %s by a client that found no map 2 s ago: %v; want refused as a duplicate", key, err)
	}
}

// A unique guard sealed where the previous shard count put it is copied
// into its shard under the new count over a guard left there from an
// earlier spell — a sealed one, or one of a release before the seal
// (no Under) that is older — and never over one taken under the new count
// (issue 38, seed 11800: 2 shards, then 8, then 2 again; a requeue under
// the last found its own task named by the old guard and took a key that
// a task scheduled under 8 held). A take under the new count always
// seals first, so a guard written under it stays even when its call
// began before the sealed one's (seed 82521: ordered by Created, the
// call's start, a take that landed late looked older than takes after it).
func TestASealedGuardIsCopiedOverOnlyALeftover(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	gk := guardKey("t", "k")
	write := func(shard, task string, at time.Time, under int, sealed int) {
		t.Helper()
		p := guardProps(task, Unique{Key: "k"}, at, under)
		if sealed != 0 {
			p[PropSealedFor] = int64(sealed)
		}
		if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Upsert, PartitionKey: shard, RowKey: gk, Props: p}}); err != nil {
			t.Fatal(err)
		}
	}
	holder := func(shard string) string {
		t.Helper()
		e, err := mt.Get(ctx(t), shard, gk)
		if err != nil {
			t.Fatal(err)
		}
		return readGuard("t", "k", e).Task
	}
	seal := func(from, to string) {
		t.Helper()
		if err := c.sealGuard(ctx(t), from, to, gk, 2); err != nil {
			t.Fatal(err)
		}
		if e, err := mt.Get(ctx(t), from, gk); err != nil || e.Props.Int(PropSealedFor) != 2 {
			t.Fatalf("guard in shard %s after sealing it for 2 shards: %v, %v; want SealedFor 2", from, e.Props, err)
		}
	}
	write("01", "old", t0, 0, 0)                    // a release before the seal, the first spell of the count
	write("05", "new", t0.Add(3*time.Minute), 8, 0) // taken under the other count
	seal("05", "01")
	if got := holder("01"); got != "new" {
		t.Fatalf("guard after copying a newer one over an older one of an earlier release: names %q, want new", got)
	}
	write("06", "older", t0.Add(time.Minute), 8, 0)
	seal("06", "01")
	if got := holder("01"); got != "new" {
		t.Fatalf("guard after copying one over a guard copied under the same count: names %q, want new", got)
	}
	seal("06", "02")
	if got := holder("02"); got != "older" {
		t.Fatalf("guard copied where there was none: names %q, want older", got)
	}
	write("03", "taken", t0, 2, 0) // taken under 2, by a call that began first
	write("07", "late", t0.Add(5*time.Minute), 8, 0)
	seal("07", "03")
	if got := holder("03"); got != "taken" {
		t.Fatalf("guard after copying a sealed one over one taken under the new count: names %q, want taken", got)
	}
	write("04", "stale", t0.Add(10*time.Minute), 2, 8) // left sealed from an earlier spell
	write("08", "cur", t0.Add(time.Minute), 8, 0)
	seal("08", "04")
	if got := holder("04"); got != "cur" {
		t.Fatalf("guard after copying over one sealed in an earlier spell: names %q, want cur", got)
	}
	// No guard where the previous count put the key: a bare seal, and
	// nothing copied.
	seal("09", "10")
	if _, err := mt.Get(ctx(t), "10", gk); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("guard copied from a bare seal: %v; want none", err)
	}
}

// sweepingTable changes the guard row between a copy's read and its
// replace, once, as the sweep's new check time does.
type sweepingTable struct {
	table.Table
	once      sync.Once
	shard, gk string
}

func (s *sweepingTable) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	e, err := s.Table.Get(ctx, pk, rk)
	if err == nil && pk == s.shard && rk == s.gk {
		s.once.Do(func() {
			_, _ = s.Table.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: pk, RowKey: rk, Props: table.Props{PropCheckAfter: t0.Add(time.Hour)}}})
		})
	}
	return e, err
}

// A copy whose replace of an older guard (of a release before the seal)
// meets the guard changed meanwhile (the sweep moved its check time)
// reads it again and still replaces it, rather than leaving the stale
// guard (a review of row 92).
func TestCopiedGuardOverAnOlderOneChangedMeanwhile(t *testing.T) {
	gk := guardKey("t", "k")
	mt := table.NewMemory("", nil)
	st := &sweepingTable{Table: mt, shard: "01", gk: gk}
	c, err := newClient(st, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		shard, task string
		at          time.Time
	}{{"01", "old", t0}, {"05", "new", t0.Add(3 * time.Minute)}} {
		if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Insert, PartitionKey: g.shard, RowKey: gk, Props: guardProps(g.task, Unique{Key: "k"}, g.at, 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.sealGuard(ctx(t), "05", "01", gk, 2); err != nil {
		t.Fatal(err)
	}
	e, err := mt.Get(ctx(t), "01", gk)
	if err != nil {
		t.Fatal(err)
	}
	if got := readGuard("t", "k", e).Task; got != "new" {
		t.Fatalf("guard after a copy that met it changed: names %q, want new", got)
	}
}

// lateTable runs before() once, just before the first transaction that
// inserts a unique guard: a request slowed in flight, landing after a
// change of the shard count and another client's take under the new one.
type lateTable struct {
	table.Table
	once   sync.Once
	prefix string // of the inserted row to wait before: GuardPrefix when empty
	before func()
}

func (l *lateTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	prefix := l.prefix
	if prefix == "" {
		prefix = GuardPrefix
	}
	for _, op := range ops {
		if strings.HasPrefix(op.RowKey, prefix) && op.Kind == table.Insert {
			l.once.Do(l.before)
		}
	}
	return l.Table.Submit(ctx, ops)
}

// settledMap writes the map of count shards with no change under way, as
// it stands once the first sharded map's walk is done.
func settledMap(t *testing.T, mt table.Table, fc *clock.Fake, count int) {
	t.Helper()
	writeFirstMap(t, mt, fc, count)
	if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Merge, PartitionKey: shard.Partition, RowKey: shard.MapRow, Props: table.Props{shard.PropPrevCount: int64(0)}}}); err != nil {
		t.Fatal(err)
	}
}

// movingKey returns a unique key of type t whose shard under 2 shards
// differs from its shard under 8, and both shards.
func movingKey() (key, under2, under8 string) {
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		under2, under8 = table.Numbered("", 2, 2).Of("t~"+key), table.Numbered("", 8, 2).Of("t~"+key)
		if under2 != under8 {
			return key, under2, under8
		}
	}
}

// A unique task placed by the old shard count whose transaction lands
// after the count changed, and after another client took the key under
// the new count, still holds its key: it meets the seal the new count's
// take left, places itself again by the new count, and a later take is
// refused naming it (issue 38, the simulator's seed 82521: a schedule
// slowed 10 s in flight across `shards set 2→8` committed its guard where
// 2 shards put it; takes under 8 never saw it, and four more tasks took
// the key while it was snoozed).
func TestAUniqueTakeLandingAfterAShardCountChangeStillHoldsItsKey(t *testing.T) {
	mt, fc, o := twoShards(t)
	key, under2, under8 := movingKey()
	u := Unique{Key: key}
	fresh, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	finished := map[string]bool{} // tasks that no longer hold the key
	live := func(_ context.Context, g Guard) (bool, error) { return !finished[g.Task], nil }
	lt := &lateTable{Table: mt}
	lt.before = func() {
		if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
			t.Fatal(err)
		}
		fc.Advance(2 * time.Second) // every client reads the new count
		first, err := fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if first.Shard != under8 {
			t.Fatalf("a take under 8 shards went to shard %s, want %s", first.Shard, under8)
		}
		finished[first.ID] = true // it ran and succeeded at once
	}
	stale, err := newClient(lt, o)
	if err != nil {
		t.Fatal(err)
	}
	late, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{})
	if err != nil {
		t.Fatalf("a take placed by 2 shards landing after the change to 8: %v; want it placed again and accepted", err)
	}
	if late.Shard != under8 {
		t.Errorf("the late take is in shard %s; want %s, the key's shard under 8 (not %s)", late.Shard, under8, under2)
	}
	fc.Advance(2 * time.Second)
	var de *DuplicateError
	if _, err := fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); !errors.As(err, &de) || de.ID != late.ID {
		t.Fatalf("a take after a late take of key %s under the old count: %v; want refused, naming %s", key, err, late.ID)
	}
	if _, err := mt.Get(ctx(t), under2, indexKey(late.ID)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the late take left an index row in shard %s: %v", under2, err)
	}
}

// The walk of a shard under a new count (Point) seals the guards it copies
// elsewhere: a take placed by the old count that lands after the walk
// meets the seal and is placed by the new count, beside the guard the walk
// copied (here refused by its live holder), rather than taking the key
// where the old count put it. A requeue's Retake does the same.
func TestAPointedGuardRefusesATakeByTheOldCount(t *testing.T) {
	mt, fc, o := twoShards(t)
	key, under2, under8 := movingKey()
	u := Unique{Key: key}
	finished := map[string]bool{}
	live := func(_ context.Context, g Guard) (bool, error) { return !finished[g.Task], nil }
	stale, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{})
	if err != nil || holder.Shard != under2 {
		t.Fatalf("take under 2 shards: %v in shard %s; want shard %s", err, holder.Shard, under2)
	}
	if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
		t.Fatal(err)
	}
	walker, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := walker.Point(ctx(t), under2, 8); err != nil {
		t.Fatal(err)
	}
	e, err := mt.Get(ctx(t), under2, guardKey("t", key))
	if err != nil || e.Props.Int(PropSealedFor) != 8 {
		t.Fatalf("guard in shard %s after the walk for 8 shards: %v, %v; want sealed for 8", under2, e.Props, err)
	}
	// The stale client still places by 2 (its map is fresh for a second).
	var de *DuplicateError
	if _, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); !errors.As(err, &de) || de.ID != holder.ID {
		t.Fatalf("a take by 2 shards after the walk: %v; want refused, naming %s", err, holder.ID)
	}
	finished[holder.ID] = true
	stale.maps.mu.Lock()
	stale.maps.m.Count, stale.maps.m.PrevCount, stale.maps.at = 2, 0, fc.Now()
	stale.maps.mu.Unlock()
	if err := stale.Retake(ctx(t), "t", key, "requeued", "", Unique{}, live); err != nil {
		t.Fatalf("a requeue's retake by 2 shards after the walk: %v; want placed by 8 and taken", err)
	}
	g, err := mt.Get(ctx(t), under8, guardKey("t", key))
	if err != nil || g.Props.Str(PropGuardTask) != "requeued" {
		t.Fatalf("guard in shard %s after the retake: %v, %v; want it to name the requeued task", under8, g.Props, err)
	}
	if e, err := mt.Get(ctx(t), under2, guardKey("t", key)); err != nil || e.Props.Str(PropGuardTask) != holder.ID {
		t.Fatalf("sealed guard in shard %s after the retake: %v, %v; want it unchanged", under2, e.Props, err)
	}
}

// A task placed by the old shard count whose write lands after its
// shard's walk under the new count (a request slowed in flight) is found
// by id through its index once the change has ended: its client writes
// the pointer the walk could not (pointLanded); without it the lookup
// scanned every row of every shard, and gave up past Options.ScanLimit. So is a unique task, and its key stays held
// under the new count (sealLanded): no guard was in the old shard for the
// walk to seal. Without it, both were found by id only while the change
// lasted, and a take under the new count after it took the key again.
func TestATaskLandingAfterItsShardsWalkIsFoundByID(t *testing.T) {
	for _, unique := range []bool{false, true} {
		mt := table.NewMemory("", nil)
		fc := clock.NewFake(t0)
		settledMap(t, mt, fc, 2)
		key, under2, under8 := movingKey()
		o := Options{Shards: []string{"00", "01"}, ShardMap: true, Clock: fc, Logger: quiet}
		lt := &lateTable{Table: mt, prefix: IndexPrefix}
		var id string
		for i := 0; ; i++ { // an id that moves, in the key's shard under 2
			if id = fmt.Sprintf("task-%d", i); table.Numbered("", 2, 2).Of(id) == under2 && table.Numbered("", 8, 2).Of(id) != under2 {
				break
			}
		}
		lt.before = func() {
			if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
				t.Fatal(err)
			}
			fc.Advance(2 * time.Second)
			walker, err := newClient(mt, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"00", "01"} {
				if err := walker.Point(ctx(t), s, 8); err != nil {
					t.Fatal(err)
				}
			}
			// Every shard done: the change ends.
			if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Merge, PartitionKey: shard.Partition, RowKey: shard.MapRow, Props: table.Props{shard.PropPrevCount: int64(0)}}}); err != nil {
				t.Fatal(err)
			}
			fc.Advance(2 * time.Second)
		}
		stale, err := newClient(lt, o)
		if err != nil {
			t.Fatal(err)
		}
		it := Item{ID: id, Type: "t", Due: t0.Add(time.Hour)}
		live := func(context.Context, Guard) (bool, error) { return true, nil }
		want := under2
		if unique {
			// A unique take finds its shard closed to takes placed by 2
			// and places itself again, drawing an id under 8.
			it.ID, want = "", under8
			it, err = stale.AddUnique(ctx(t), it, Unique{Key: key}, live, AddOptions{})
			id = it.ID
		} else {
			it, err = stale.Add(ctx(t), it, AddOptions{})
		}
		if err != nil || it.Shard != want {
			t.Fatalf("unique %v: add by 2 shards landing after the walk: %v in shard %s; want written in %s", unique, err, it.Shard, want)
		}
		sc := &scanCounter{Table: mt}
		fresh, err := newClient(sc, o)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := fresh.Get(ctx(t), id); err != nil || got.ID != id || sc.scans != 0 {
			t.Fatalf("unique %v: lookup by id under 8 shards after the change: %v, %v, %d queries of the schedule's rows; want the task through its id index (none)", unique, got.ID, err, sc.scans)
		}
		if !unique {
			continue
		}
		var de *DuplicateError
		if _, err := fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: key}, live, AddOptions{}); !errors.As(err, &de) || de.ID != id {
			t.Fatalf("a take under 8 shards after the change: %v; want refused, naming %s", err, id)
		}
	}
}

// scanCounter counts the queries of the schedule's rows (not the shard
// map's): a lookup by id that misses the index scans item rows.
type scanCounter struct {
	table.Table
	scans int
}

func (s *scanCounter) Query(ctx context.Context, q table.Query) (table.Page, error) {
	if q.Partition != shard.Partition {
		s.scans++
	}
	return s.Table.Query(ctx, q)
}

// endChange walks every shard of the previous count for count (as their
// owners do) and ends the change (as the balancer does once every shard
// is done).
func endChange(t *testing.T, mt table.Table, o Options, prev, count int) {
	t.Helper()
	walker, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shard.Names(max(prev, count)) {
		if err := walker.Point(ctx(t), s, count); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Merge, PartitionKey: shard.Partition, RowKey: shard.MapRow, Props: table.Props{shard.PropPrevCount: int64(0)}}}); err != nil {
		t.Fatal(err)
	}
}

// A unique take placed by the old shard count whose transaction lands
// after the whole change — every shard walked, the change ended, and the
// key taken under the new count, which seals nothing once the change has
// ended — finds its shard closed to takes placed by the old count, places
// itself again by the new one and is refused there, naming the holder
// (issue 38: a review of the fix of seed 82521 found it taking the key
// beside the holder; the walk now deletes the old count's open row first).
func TestATakeByTheOldCountLandingAfterTheChangeEndedIsPlacedAgain(t *testing.T) {
	testLateTakeAfterTheChange(t, table.NewMemory("", nil))
}

// testLateTakeAfterTheChange is TestATakeByTheOldCountLandingAfterTheChangeEndedIsPlacedAgain
// on mt, an empty schedule table.
func testLateTakeAfterTheChange(t *testing.T, mt table.Table) {
	fc := clock.NewFake(t0)
	settledMap(t, mt, fc, 2)
	if m, err := shard.Read(ctx(t), mt); err != nil || m.Open != 2 {
		t.Fatalf("map after the first balancer: open for %d, %v; want open rows for 2", m.Open, err)
	}
	key, under2, under8 := movingKey()
	u := Unique{Key: key}
	o := Options{Shards: []string{"00", "01"}, ShardMap: true, Clock: fc, Logger: quiet}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	var holder Item
	lt := &lateTable{Table: mt}
	lt.before = func() {
		if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
			t.Fatal(err)
		}
		fc.Advance(2 * time.Second)
		endChange(t, mt, o, 2, 8)
		fc.Advance(2 * time.Second)
		fresh, err := newClient(mt, o)
		if err != nil {
			t.Fatal(err)
		}
		if holder, err = fresh.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); err != nil || holder.Shard != under8 {
			t.Fatalf("take under 8 shards after the change: %v in shard %s; want shard %s", err, holder.Shard, under8)
		}
	}
	stale, err := newClient(lt, o)
	if err != nil {
		t.Fatal(err)
	}
	var de *DuplicateError
	if late, err := stale.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); !errors.As(err, &de) || de.ID != holder.ID {
		t.Fatalf("a take placed by 2 shards landing after the change ended: %v (task %s in shard %s); want refused, naming %s", err, late.ID, late.Shard, holder.ID)
	}
	if e, err := mt.Get(ctx(t), under2, guardKey("t", key)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the late take left a guard in shard %s: %v, %v", under2, e.Props, err)
	}
}

// A task still holding its key in a guard sealed in an earlier spell of
// another count, and left where it stands (the key's shard under that
// count held no guard when the count came back), is unsealed by its
// retake, so the walk of the next change copies it rather than leaving it
// as a leftover (issue 38, a review of the fix of seed 82521).
func TestARetakeUnsealsALeftoverNamingItsTask(t *testing.T) {
	mt, fc, o := twoShards(t)
	var key, under2, under8, under4 string
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		under2, under8, under4 = table.Numbered("", 2, 2).Of("t~"+key), table.Numbered("", 8, 2).Of("t~"+key), table.Numbered("", 4, 2).Of("t~"+key)
		if under2 != under8 && under4 != under2 {
			break
		}
	}
	u := Unique{Key: key}
	live := func(context.Context, Guard) (bool, error) { return true, nil }
	c, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change := func(from, to int) { changeCount(t, mt, fc, o, from, to) }
	change(2, 8)
	// The copy under 8 is swept (say its task was thought gone), and the
	// count comes back to 2: the guard under 2 stays sealed for 8.
	if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: under8, RowKey: guardKey("t", key)}}); err != nil {
		t.Fatal(err)
	}
	change(8, 2)
	if e, err := mt.Get(ctx(t), under2, guardKey("t", key)); err != nil || e.Props.Int(PropSealedFor) != 8 {
		t.Fatalf("guard in shard %s back under 2 shards: %v, %v; want the leftover sealed for 8", under2, e.Props, err)
	}
	if err := c.Retake(ctx(t), "t", key, holder.ID, "", u, live); err != nil {
		t.Fatal(err)
	}
	change(2, 4)
	var de *DuplicateError
	if _, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, u, live, AddOptions{}); !errors.As(err, &de) || de.ID != holder.ID {
		t.Fatalf("a take under 4 shards of a key %s still holds: %v; want refused, naming it", holder.ID, err)
	}
	if e, err := mt.Get(ctx(t), under4, guardKey("t", key)); err != nil || e.Props.Str(PropGuardTask) != holder.ID {
		t.Errorf("guard in shard %s under 4 shards: %v, %v; want it to name %s", under4, e.Props, err, holder.ID)
	}
}

// While the shard count changes, a lookup reads the id's index row where
// the new count places it and where the old one did. A stale pointer in
// the new count's shard (its target has no index row of the id any more)
// must not hide the index row an AddMany under way wrote in the old
// count's shard: a cancel racing that batch's row deletes that index row
// with the row, as it does with one count (issue 38, sim seed 99748; a
// review of its fix found the lookup kept only the first orphan).
func TestACancelRacingAnAddManyDuringAShardChangeTakesItsIndexRowToo(t *testing.T) {
	mt := table.NewMemory("", nil)
	fc := clock.NewFake(t0)
	settledMap(t, mt, fc, 2)
	if _, err := shard.SetCount(ctx(t), mt, 8); err != nil {
		t.Fatal(err)
	}
	fc.Advance(2 * time.Second)
	var id, under2, under8 string
	for i := 0; ; i++ {
		id = fmt.Sprintf("task-%d", i)
		if under2, under8 = table.Numbered("", 2, 2).Of(id), table.Numbered("", 8, 2).Of(id); under2 != under8 {
			break
		}
	}
	elsewhere := "07"
	for _, s := range shard.Names(8) {
		if s != under2 && s != under8 {
			elsewhere = s
			break
		}
	}
	if err := mt.PutRaw(under8, indexKey(id), table.Props{PropShard: elsewhere, PropID: id}); err != nil {
		t.Fatal(err)
	}
	due := fc.Now().Add(time.Hour)
	rk, err := RowKey(due, id)
	if err != nil {
		t.Fatal(err)
	}
	lt := &landsOnMiss{Table: mt, pk: under2, rk: rk, props: itemProps(Item{ID: id, Due: due}, true)}
	c, err := newClient(lt, Options{Shards: []string{"00", "01"}, ShardMap: true, Clock: fc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b := &batch{c: c, res: []AddResult{{Item: Item{ID: id, RowKey: rk}}}}
	if _, err := mt.Submit(ctx(t), b.indexOps(chunk{shard: under2, items: []int{0}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx(t), id); err != nil || !lt.landed {
		t.Fatalf("cancel of the row that landed: %v (landed %v)", err, lt.landed)
	}
	if _, err := mt.Get(ctx(t), under2, indexKey(id)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the cancelled task's index row in the old count's shard is left: %v", err)
	}
	if _, err := c.Add(ctx(t), Item{ID: id, Due: due.Add(time.Minute)}, AddOptions{}); err != nil {
		t.Errorf("schedule of the cancelled id: %v", err)
	}
}

// Before any shard map, a worker already on more shards (the rolling
// switch: workers first, then clients) that takes a key places its guard
// by its own count and leaves a bare seal where one shard puts it; a
// client still on one shard meets that seal and must not take it for one
// left from an earlier spell: the guard the seal points to decides
// (issue 38, sim seed 143196: a bulk requeue on a sharded worker retook
// a dead task's key, and an unsharded client's schedule took it too while
// the requeued task still held it).
func TestAKeyTakenAheadOfTheMapHoldsForAClientBehindIt(t *testing.T) {
	for _, retake := range []bool{false, true} {
		t.Run(fmt.Sprintf("retake=%v", retake), func(t *testing.T) {
			mt := table.NewMemory("", nil)
			fc := clock.NewFake(t0)
			w, err := newClient(mt, Options{Shards: shard.Names(8), ShardMap: true, Clock: fc, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			c, err := newClient(mt, Options{Shards: []string{"00"}, ShardMap: true, Clock: fc, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			var key string
			for i := 0; ; i++ {
				if key = fmt.Sprintf("k%d", i); table.Numbered("", 8, 2).Of("t~"+key) != "00" {
					break
				}
			}
			if retake {
				if err := w.Retake(ctx(t), "t", key, "dead1", "rq-1", Unique{For: time.Hour}, holds(true)); err != nil {
					t.Fatal(err)
				}
			} else if _, err := w.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: key}, holds(true), AddOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err = c.AddUnique(ctx(t), Item{ID: "c1", Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: key}, holds(true), AddOptions{})
			var dup *DuplicateError
			if !errors.As(err, &dup) {
				t.Fatalf("a client on one shard took key %s, held under eight shards: %v; want a DuplicateError", key, err)
			}
			// Once its holder no longer holds it, the key is the client's,
			// and a take under eight shards meets the client's task (its
			// guard copied where eight shards put the key, over the stale
			// one, which the client's take removed).
			if _, err := c.AddUnique(ctx(t), Item{ID: "c2", Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: key}, holds(false), AddOptions{}); err != nil {
				t.Fatalf("a client on one shard, the key's holder gone: %v", err)
			}
			onlyC2 := func(_ context.Context, g Guard) (bool, error) { return g.Task == "c2", nil }
			_, err = w.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(time.Hour)}, Unique{Key: key}, onlyC2, AddOptions{})
			if !errors.As(err, &dup) || dup.ID != "c2" {
				t.Fatalf("a take under eight shards while the client's task holds the key: %v; want a DuplicateError naming c2", err)
			}
		})
	}
}

package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/shard"
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
	if err := stale2.Retake(ctx(t), "t", key, "requeued", Unique{}, holds(true)); !errors.As(err, &de) {
		t.Fatalf("a requeue retaking key %s by a client that found no map 2 s ago: %v; want refused as a duplicate", key, err)
	}
}

// A unique guard copied from another shard (a previous shard count's)
// replaces one already in the destination only when that one is older: a
// guard left there from an earlier spell of the same count names a task
// whose key a later take, made under the other count, has passed on
// (issue 38, seed 11800: 2 shards, then 8, then 2 again; a requeue under
// the last found its own task named by the old guard and took a key that
// a task scheduled under 8 held). A newer guard in the destination stays.
func TestCopiedGuardReplacesOnlyAnOlderOne(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	gk := guardKey("t", "k")
	write := func(shard, task string, at time.Time) {
		t.Helper()
		if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Upsert, PartitionKey: shard, RowKey: gk, Props: guardProps(task, Unique{Key: "k"}, at)}}); err != nil {
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
	write("01", "old", t0)                    // the first spell of the count
	write("05", "new", t0.Add(3*time.Minute)) // taken under the other count
	if err := c.copyGuard(ctx(t), "05", "01", gk); err != nil {
		t.Fatal(err)
	}
	if got := holder("01"); got != "new" {
		t.Fatalf("guard after copying a newer one over an older: names %q, want new", got)
	}
	write("06", "older", t0.Add(time.Minute))
	if err := c.copyGuard(ctx(t), "06", "01", gk); err != nil {
		t.Fatal(err)
	}
	if got := holder("01"); got != "new" {
		t.Fatalf("guard after copying an older one over a newer: names %q, want new", got)
	}
	if err := c.copyGuard(ctx(t), "06", "02", gk); err != nil {
		t.Fatal(err)
	}
	if got := holder("02"); got != "older" {
		t.Fatalf("guard copied where there was none: names %q, want older", got)
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

// A copy whose replace of an older guard meets the guard changed
// meanwhile (the sweep moved its check time) reads it again and still
// replaces it, rather than leaving the stale guard (a review of row 92).
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
		if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Insert, PartitionKey: g.shard, RowKey: gk, Props: guardProps(g.task, Unique{Key: "k"}, g.at)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.copyGuard(ctx(t), "05", "01", gk); err != nil {
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

package blackboard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

// startBlocked claims key on a worker of its own whose handler blocks
// until released or cancelled, and returns the run's report channel
// once the handler has started.
func startBlocked(t *testing.T, s Store, clk *clock.Fake, key string) (r *recorder, release chan error, runs chan RunReport, done chan struct{}) {
	t.Helper()
	r = &recorder{}
	started, release := blocking(r)
	runs = make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.InstanceID = "w1"
		o.LockTTL = 30 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	done = make(chan struct{})
	go func() { runOnce(t, w); close(done) }()
	<-started
	return r, release, runs, done
}

// A key removed while a worker runs it and added again at once does not
// start on another worker beside that run: the removal marks the row,
// which keeps the claim; the add takes the row over as a new key; the
// run stops at its next heartbeat and leaves the row unclaimed, and only
// then does the key start again, with its new definition (issue 38, row
// 172, sweep seed 93173: the remove deleted the row and the lock with
// it, and the key added again ran on two workers for about 4 s).
func TestAKeyRemovedAndAddedAgainDoesNotRunBesideItsRun(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	clk := clock.NewFake(time.Now())
	b := NewBoardWithStore(s)
	addKey(t, s, "k", time.Hour)
	_, _, runs, done := startBlocked(t, s, clk, "k")

	if err := b.Remove(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a removed key whose run is stopping: %v; want ErrNotFound", err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("List: %v, %v; want no key", list, err)
	}
	if err := b.RunNow(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RunNow of a removed key: %v; want ErrNotFound", err)
	}
	if err := b.Remove(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second Remove: %v; want ErrNotFound", err)
	}
	if err := b.Add(ctx, Entry{Key: "k", Interval: time.Minute, Type: "count", Payload: "new"}, nil); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Get(ctx, "k"); err != nil || e.Payload != "new" || e.Interval != time.Minute || !e.Running {
		t.Fatalf("the key added again: %+v, %v; want the new definition, the old claim kept", e, err)
	}

	other := &recorder{}
	w2 := newWorker(t, s, clk, other, func(o *Options) { o.InstanceID = "w2" })
	if rep := runOnce(t, w2); rep.Claimed != 0 || other.count() != 0 {
		t.Fatalf("another worker claimed the key added again while its removed run held it: %+v", rep)
	}

	// The first heartbeat stops the removed run and leaves the row to
	// the new key, due at once.
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	<-done
	rr := <-runs
	if !errors.Is(rr.Err, errStopped) || rr.Recorded {
		t.Fatalf("report of the removed run: %+v; want it stopped, its outcome not recorded", rr)
	}
	if e := get(t, s, "k"); e.Running || e.StopClaim != "" || !e.RunNow || e.Payload != "new" {
		t.Fatalf("row after the removed run stopped: %+v; want it unclaimed and due, with the new definition", e)
	}
	if rep := runOnce(t, w2); rep.Claimed != 1 || other.count() != 1 || string(other.tasks[0].Payload) != "new" {
		t.Fatalf("the key added again: %+v, %d runs; want it run once with its new definition", rep, other.count())
	}
}

// A key removed while it runs is deleted when its run stops: at its next
// heartbeat, or when the handler returns first.
func TestAKeyRemovedWhileItRunsIsDeletedWhenItsRunStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(clk *clock.Fake, release chan error)
	}{
		{"at the heartbeat", func(clk *clock.Fake, _ chan error) {
			if err := clk.WaitForTimers(context.Background(), 1); err != nil {
				panic(err)
			}
			clk.Advance(10 * time.Second)
		}},
		{"the handler returning first", func(_ *clock.Fake, release chan error) { release <- nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := NewMemoryStore()
			clk := clock.NewFake(time.Now())
			addKey(t, s, "k", time.Hour)
			_, release, runs, done := startBlocked(t, s, clk, "k")
			if err := NewBoardWithStore(s).Remove(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if e := get(t, s, "k"); e.Removed.IsZero() || e.StopClaim != e.ClaimID || !e.Running {
				t.Fatalf("row of a key removed while it runs: %+v; want it marked, its claim kept", e)
			}
			tc.stop(clk, release)
			<-done
			if rr := <-runs; rr.Recorded {
				t.Fatalf("report %+v: a removed key's outcome is not recorded", rr)
			}
			if _, err := s.Get(ctx, "k"); !errors.Is(err, leasecrontype.ErrNotFound) {
				t.Fatalf("row after the run stopped: %v; want it deleted", err)
			}
		})
	}
}

// A removed key whose worker died before its run stopped is deleted by
// the first walk past its lock, not run; one whose lock holds is left.
func TestARemovedKeyWhoseWorkerDiedIsDeletedPastItsLock(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	clk := clock.NewFake(time.Now())
	addKey(t, s, "k", time.Minute)
	e := get(t, s, "k")
	// (The Board reads the lock by the wall clock.)
	lock := clk.Now().Add(time.Minute)
	e.Running, e.Stoppable, e.ClaimID, e.Worker, e.ClaimedAt, e.Start, e.LockedUntil = true, true, "dead", "gone", clk.Now(), clk.Now(), lock
	if _, err := s.Replace(ctx, e, e.ETag); err != nil {
		t.Fatal(err)
	}
	if err := NewBoardWithStore(s).Remove(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	w := newWorker(t, s, clk, r, nil)
	runOnce(t, w)
	if _, err := s.Get(ctx, "k"); err != nil {
		t.Fatalf("a removed key's row within its lock: %v; want it kept for its run", err)
	}
	clk.Advance(2 * time.Minute)
	runOnce(t, w)
	if _, err := s.Get(ctx, "k"); !errors.Is(err, leasecrontype.ErrNotFound) || r.count() != 0 {
		t.Fatalf("past its lock: %v, %d runs; want the row deleted and nothing run", err, r.count())
	}
}

// A key claimed by a worker of an earlier release, which writes back only
// the properties it knows and would drop the mark, is deleted at once, as
// before.
func TestRemoveOfAClaimByAnEarlierReleaseDeletesTheRow(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	addKey(t, s, "old", time.Minute)
	intrude(t, s, "old", "older-release", time.Now()) // Stoppable unset
	if err := NewBoardWithStore(s).Remove(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "old"); !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("row of a key claimed by an older worker after its remove: %v; want it deleted", err)
	}
}

// A key whose worker died holding it, removed and added again, is free at
// once: its lapsed claim is not kept (as a takeover would not wait for it
// either), and the remove deletes such a row outright.
func TestAKeyOfADeadWorkerRemovedAndAddedAgainRunsAtOnce(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	b := NewBoardWithStore(s)
	addKey(t, s, "k", time.Hour)
	lapsed := time.Now().Add(-time.Minute)
	e := get(t, s, "k")
	e.Running, e.Stoppable, e.ClaimID, e.Worker, e.ClaimedAt, e.Start, e.LockedUntil = true, true, "dead", "gone", lapsed.Add(-time.Hour), lapsed.Add(-time.Hour), lapsed
	if _, err := s.Replace(ctx, e, e.ETag); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("row of a lapsed claim after its remove: %v; want it deleted", err)
	}
	// Marked while its claim held, and the claim lapsed since: an add
	// does not keep it.
	addKey(t, s, "k", time.Hour)
	e = get(t, s, "k")
	e.Running, e.Stoppable, e.ClaimID, e.StopClaim, e.Removed, e.LockedUntil = true, true, "dead", "dead", lapsed, lapsed
	if _, err := s.Replace(ctx, e, e.ETag); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(ctx, Entry{Key: "k", Interval: time.Hour, Type: "count", Payload: "new"}, nil); err != nil {
		t.Fatal(err)
	}
	if e := get(t, s, "k"); e.Running || e.StopClaim != "" || !e.Removed.IsZero() || e.Payload != "new" {
		t.Fatalf("row added over a removed key whose claim lapsed: %+v; want a fresh key", e)
	}
	r := &recorder{}
	if rep := runOnce(t, newWorker(t, s, clock.NewFake(time.Now()), r, nil)); rep.Claimed != 1 || r.count() != 1 {
		t.Fatalf("the key added again: %+v; want it run at once", rep)
	}
}

// A claim whose answer was lost, with a remove landing between its commit
// and its read-back, is not run (or, run, stops at its first heartbeat):
// taken as its own as read back, the marked row's ETag let every
// heartbeat write on, and the removed key ran to its end (a review of
// row 172's fix).
func TestAClaimReadBackAfterARemoveDoesNotRunOn(t *testing.T) {
	ctx := context.Background()
	mem := NewMemoryStore()
	s := &lostStore{Store: mem}
	clk := clock.NewFake(time.Now())
	addKey(t, mem, "k", time.Hour)
	var removeErr error
	fired := false
	s.set(func(e Entry) error {
		if fired || !e.Running || e.Worker != "w1" {
			return nil
		}
		fired = true
		// The claim committed; its answer is lost; a remove lands before
		// the SDK's retry meets the changed row as a conflict.
		removeErr = NewBoardWithStore(mem).Remove(ctx, "k")
		return fmt.Errorf("update: %w", ErrConflict)
	})
	r := &recorder{}
	started, _ := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.InstanceID = "w1"
		o.LockTTL = 30 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	done := make(chan struct{})
	go func() { runOnce(t, w); close(done) }()
	select {
	case <-started:
		t.Logf("the handler began after the remove answered (%v)", removeErr)
	case <-done:
		return // not run at all: fine
	}
	if removeErr != nil {
		t.Fatalf("remove: %v", removeErr)
	}
	// Two heartbeats: the docs promise the run stops at the first.
	for i := 0; i < 2; i++ {
		if err := clk.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		select {
		case <-done:
			rr := <-runs
			if rr.Recorded {
				t.Fatalf("report %+v: a removed key's outcome is recorded", rr)
			}
			if _, err := mem.Get(ctx, "k"); !errors.Is(err, leasecrontype.ErrNotFound) {
				t.Fatalf("row after the run stopped: %v; want it deleted", err)
			}
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	e := get(t, mem, "k")
	t.Fatalf("a run of a removed key is still running after two heartbeats; row %+v (Removed %v, StopClaim==ClaimID %v, LockedUntil %v)",
		e.Key, e.Removed, e.StopClaim == e.ClaimID, e.LockedUntil)
}

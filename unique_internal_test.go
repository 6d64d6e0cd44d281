package leasecron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/schedule"
)

// A task holds its unique key through every state between attempts — a
// failed attempt waiting for its retry, a snooze, a delivery handed back at
// shutdown — however long ago that attempt ended: the finish time of an
// attempt that was not the last does not start the key's window (issue 38:
// a second task with the key was accepted during the retry backoff). Only
// a finished run (succeeded, dead) holds it for the window after it ended.
func TestHoldsKeyBetweenAttempts(t *testing.T) {
	ctx := context.Background()
	clk, sched, rs := keyFixture(t)
	g := schedule.Guard{Type: "t", Key: "k", For: 0, States: DefaultUniqueStates, Created: clk.Now()}
	claim := func(id string, attempt int) {
		t.Helper()
		if _, err := rs.Claim(ctx, id, "w1", attempt, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: clk.Now()}); err != nil {
			t.Fatalf("claim %s attempt %d: %v", id, attempt, err)
		}
	}
	holds := func(id string) bool {
		t.Helper()
		g.Task = id
		h, err := holdsKey(ctx, sched, rs, clk.Now(), g)
		if err != nil {
			t.Fatalf("holdsKey(%s): %v", id, err)
		}
		return h
	}
	for _, c := range []struct {
		name  string
		end   func(id string) error
		holds bool
	}{
		{"failed, waiting for its retry", func(id string) error { return rs.Finish(ctx, id, runs.Failed, errors.New("boom"), "") }, true},
		{"snoozed", func(id string) error { return rs.Snooze(ctx, id, clk.Now().Add(time.Hour), "") }, true},
		{"handed back at shutdown", func(id string) error { return rs.Finish(ctx, id, runs.Queued, errors.New("shutdown"), "") }, true},
		{"succeeded (no window)", func(id string) error { return rs.Finish(ctx, id, runs.Succeeded, nil, "") }, false},
		{"dead (no window)", func(id string) error { return rs.Finish(ctx, id, runs.Dead, errors.New("boom"), "") }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "task-" + c.name[:4]
			claim(id, 1)
			if !holds(id) {
				t.Fatal("a running task does not hold its key")
			}
			if err := c.end(id); err != nil {
				t.Fatal(err)
			}
			clk.Advance(10 * time.Minute) // a long backoff or snooze
			if got := holds(id); got != c.holds {
				t.Fatalf("ten minutes after the attempt ended: holds = %v, want %v", got, c.holds)
			}
		})
	}
	// A finished run holds its key for the window after it ended, not a
	// moment less.
	g.For = time.Minute
	claim("windowed", 1)
	if err := rs.Finish(ctx, "windowed", runs.Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	if !holds("windowed") {
		t.Fatal("a run that succeeded 59 s ago does not hold its key for its 1 m window")
	}
	clk.Advance(2 * time.Second)
	if holds("windowed") {
		t.Fatal("a run that succeeded 61 s ago still holds its key after its 1 m window")
	}
}

// A task put back by its type's rate limit before its first attempt is
// still queued as far as its unique key goes, though its run shows
// snoozed (runs.Store.NoteWaiting): with the states "scheduled, queued,
// running" ("at most one in flight") it holds the key while it waits
// (issue 38, the simulator's seed 14473: a rated task waiting a minute
// for its budget lost its key to another task). A snooze after an
// attempt began counts as snoozed only.
func TestHoldsKeyWhileWaitingForItsRate(t *testing.T) {
	ctx := context.Background()
	clk, sched, rs := keyFixture(t)
	inFlight := []RunState{RunScheduled, RunQueued, RunRunning}
	holds := func(id string) bool {
		t.Helper()
		h, err := holdsKey(ctx, sched, rs, clk.Now(), schedule.Guard{Type: "t", Key: "k", Task: id, States: inFlight, Created: clk.Now()})
		if err != nil {
			t.Fatalf("holdsKey(%s): %v", id, err)
		}
		return h
	}
	due := clk.Now()
	if ok := rs.MarkQueued(ctx, []runs.Mark{{ID: "waits", Meta: runs.Meta{Type: "t", Due: due}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	if noted, err := rs.NoteWaiting(ctx, "waits", runs.Meta{Type: "t", Due: due}, clk.Now().Add(time.Minute), "rate limit"); err != nil || !noted {
		t.Fatalf("note waiting: %v, %v", noted, err)
	}
	if r, _ := rs.Get(ctx, "waits"); r.State != runs.Snoozed {
		t.Fatalf("a run waiting for its rate shows %s; the test expects snoozed", r.State)
	}
	if !holds("waits") {
		t.Error("a task waiting for its rate before its first attempt does not hold its key under scheduled,queued,running")
	}
	if _, err := rs.Claim(ctx, "snoozes", "w1", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Snooze(ctx, "snoozes", clk.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if holds("snoozes") {
		t.Error("a task its handler snoozed holds its key under scheduled,queued,running")
	}
	// Handed back at shutdown after its attempt began, then put back for
	// its rate before it is claimed again: queued as far as its key goes,
	// though it shows snoozed after an attempt, as a handler's snooze
	// does (row 99's last case).
	if _, err := rs.Claim(ctx, "handed", "w1", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Finish(ctx, "handed", runs.Queued, nil, ""); err != nil {
		t.Fatal(err)
	}
	if noted, err := rs.NoteWaiting(ctx, "handed", runs.Meta{Type: "t", Due: due}, clk.Now().Add(time.Minute), "waiting for the rate limit of t"); err != nil || !noted {
		t.Fatalf("note waiting after a hand-back: %v, %v", noted, err)
	}
	if r, _ := rs.Get(ctx, "handed"); r.State != runs.Snoozed || r.Attempts != 1 || r.OutputTail != "waiting for the rate limit of t" || !r.WaitingForRate() {
		t.Errorf("a run handed back and then waiting for its rate: %s after %d attempts, output %q, waiting for its rate %v; want snoozed after 1, with why it waits, marked", r.State, r.Attempts, r.OutputTail, r.WaitingForRate())
	}
	if !holds("handed") {
		t.Error("a task handed back at shutdown and waiting for its rate does not hold its key under scheduled,queued,running")
	}
	// Claimed again, and snoozed by its handler: the mark is stale.
	clk.Advance(time.Minute)
	if _, err := rs.Claim(ctx, "handed", "w2", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Snooze(ctx, "handed", clk.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if holds("handed") {
		t.Error("a task its handler snoozed after a wait for its rate holds its key under scheduled,queued,running")
	}
}

// keyFixture is a fake clock with an in-memory schedule and run records
// on it, for holdsKey.
func keyFixture(t *testing.T) (*clock.Fake, *schedule.Client, *runs.Store) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sched, err := schedule.NewMemory(schedule.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return clk, sched, runs.NewMemory(clk).Store
}

// A one-off task whose row is still in the schedule after its message went
// out (the mover sends a row before it removes it) holds its key as its
// run record says: running, it holds it under "queued,running", which
// leaves out "scheduled" (it did not: two live tasks held one key);
// succeeded, it no longer holds it under "scheduled,queued,running" (it
// did until the row went). A record of an earlier scheduling of the id
// does not count for the pending row, and a series holds its key for as
// long as it lasts, whatever the states (the README's "Unique tasks").
func TestHoldsKeyOfAPendingRowByItsRun(t *testing.T) {
	ctx := context.Background()
	clk, sched, rs := keyFixture(t)
	due := clk.Now()
	add := func(it schedule.Item) {
		t.Helper()
		it.Type = "t"
		if _, err := sched.Add(ctx, it, schedule.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id string, at time.Time, end runs.State) {
		t.Helper()
		if _, err := rs.Claim(ctx, id, "w1", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: at}); err != nil {
			t.Fatal(err)
		}
		if end != "" {
			if err := rs.Finish(ctx, id, end, nil, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(schedule.Item{ID: "running", Due: due})
	run("running", due, "")
	add(schedule.Item{ID: "done", Due: due})
	run("done", due, runs.Succeeded)
	add(schedule.Item{ID: "again", Due: due.Add(time.Hour)})
	run("again", due, runs.Succeeded) // an earlier scheduling's run
	add(schedule.Item{ID: "unsent", Due: due})
	add(schedule.Item{ID: "series", Due: due, Recurrence: "@every 1m"})
	add(schedule.Item{ID: "old", Due: due})
	run("old", time.Time{}, runs.Succeeded) // an earlier release's record: no due time
	live := []RunState{RunQueued, RunRunning}
	inFlight := []RunState{RunScheduled, RunQueued, RunRunning}
	for _, c := range []struct {
		id     string
		states []RunState
		holds  bool
	}{
		{"running", live, true},
		{"running", inFlight, true},
		{"done", inFlight, false},
		{"done", DefaultUniqueStates, false}, // no window (For 0)
		{"again", inFlight, true},
		{"again", live, false},
		{"unsent", inFlight, true},
		{"unsent", live, false},
		{"series", live, true},
		{"series", []RunState{RunRunning}, true},
		{"old", DefaultUniqueStates, true},
	} {
		g := schedule.Guard{Type: "t", Key: "k", Task: c.id, States: c.states, Created: clk.Now()}
		if got, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || got != c.holds {
			t.Errorf("%s under %v: holds %v, %v; want %v", c.id, c.states, got, err, c.holds)
		}
	}
	// The leader's sweep keeps the guard of a pending task that does not
	// hold its key yet (it will once moved), and of one between attempts
	// (failed or snoozed: it holds it again when its next attempt runs;
	// seed 86714), and drops a gone or finished task's.
	run("retrying", due, runs.Failed)
	run("snoozing", due, runs.Snoozed)
	run("finished", due, runs.Succeeded)
	for _, id := range []string{"retrying", "snoozing"} {
		g := schedule.Guard{Type: "t", Key: "k", Task: id, States: live, Created: clk.Now()}
		if got, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || got {
			t.Errorf("%s under %v: holds %v, %v; want false (between attempts)", id, live, got, err)
		}
	}
	for _, c := range []struct {
		id   string
		keep bool
	}{{"unsent", true}, {"gone", false}, {"retrying", true}, {"snoozing", true}, {"finished", false}} {
		g := schedule.Guard{Type: "t", Key: "k", Task: c.id, States: live, Created: clk.Now()}
		if got, err := keepsGuard(ctx, sched, rs, clk.Now(), g); err != nil || got != c.keep {
			t.Errorf("the sweep of %s's guard under %v: keeps %v, %v; want %v", c.id, live, got, err, c.keep)
		}
	}
}

package leasecron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/schedule"
)

// Unique makes Schedule create a task only while no other task of the same
// type holds Key: one that is pending, queued, running, snoozed or between
// attempts, or that finished (succeeded or dead) less than For ago — or
// in the States given instead. See the README's "Unique tasks".
type Unique = schedule.Unique

// DuplicateError is what Schedule returns (wrapping ErrDuplicate) when
// another task holds the unique key: its ID is that task's.
type DuplicateError = schedule.DuplicateError

// DefaultUniqueStates are the run states that hold a unique key when
// Unique.States is empty: all but cancelled.
var DefaultUniqueStates = schedule.DefaultUniqueStates

// scheduleUnique adds a task holding a unique key.
func (c *Client) scheduleUnique(ctx context.Context, it Item, u Unique, ao schedule.AddOptions) (Item, error) {
	if err := c.checkUniqueWindow(u); err != nil {
		return Item{}, err
	}
	return c.sched.AddUnique(ctx, it, u, c.holdsKey, ao)
}

// checkUniqueWindow refuses a window longer than the run records of the
// ended states it counts (succeeded, cancelled, dead) are kept: the window counts
// from the end its task's record shows, and past the record's retention
// that end is gone, so the key would be free early (a review's find: a
// 30-day window ended after 7 days, the default runs.retention). The
// retentions are this client's; the leader's cleaner uses its own, so
// README asks that a fleet's runs.* agree. Without run records the window
// counts from the schedule, kept on the guard itself.
func (c *Client) checkUniqueWindow(u Unique) error {
	if c.runs == nil {
		return nil
	}
	states := u.States
	if len(states) == 0 {
		states = schedule.DefaultUniqueStates
	}
	kept, failed := c.runs.Retention()
	for _, k := range []struct {
		st   RunState
		keep time.Duration
		key  string
	}{{RunSucceeded, kept, "runs.retention"}, {RunCancelled, kept, "runs.retention"}, {RunDead, failed, "runs.retention_failed"}} {
		if slices.Contains(states, k.st) && u.For > k.keep {
			return specErr("unique_for", fmt.Sprintf("a duration of at most %s (%s), or unique states without %s", k.keep, k.key, k.st), fmt.Errorf("%w: unique window %s is longer than the records of %s runs are kept (%s %s): the window counts from the end its task's record shows, gone after that; shorten the window to at most %s, raise %s to at least %s, or leave %s out of the unique states",
				ErrInvalidTask, u.For, k.st, k.key, k.keep, k.keep, k.key, u.For, k.st))
		}
	}
	return nil
}

func (c *Client) holdsKey(ctx context.Context, g schedule.Guard) (bool, error) {
	return holdsKey(ctx, c.sched, c.runs, c.o.Clock.Now(), g)
}

// keepsGuard is holdsKey for the leader's sweep of the guards: a pending
// one-off task keeps its guard even under states that leave out
// "scheduled" — it holds its key once it is moved, and a guard deleted
// meanwhile would let another task take the key while it runs (a
// review's find). So does a task between attempts (its run failed or
// snoozed, not finished), under states that leave out those: it holds
// its key again when its next attempt is queued and runs (issue 38, sweep
// seed 86714: under "scheduled,queued,running" the sweep deleted the
// guard of a task waiting for its retry, and another task took the key
// while its third attempt ran). A schedule in that gap may still take
// the key over (holdsKey).
func keepsGuard(ctx context.Context, sched *schedule.Client, rs *runs.Store, now time.Time, g schedule.Guard) (bool, error) {
	held, pending, ran, err := keyHolder(ctx, sched, rs, now, g)
	return held || pending || ran != "" && !ran.Finished(), err
}

// holdsKey reports whether the task a unique guard names still holds its
// key: a series while its row lasts; a one-off task while it is pending,
// or while its run record is in a state that counts — for a finished run,
// until the window after it finished has passed. Without run records, a
// task that left the schedule holds its key for the window after it was
// scheduled.
//
// A one-off task's row may still be there after its message went out (the
// mover sends a row before it removes it; a row its client sends, or the
// mover sends early, waits for a later pass): when its run record is of
// the row's due time, the record says which state it is in. Trusting the
// row alone, a task already running did not hold its key under states
// without "scheduled" (two live holders), and one already succeeded held
// it under states without "succeeded" (a review's find, reading the code
// for the kind of defect of issue 38's row 112).
func holdsKey(ctx context.Context, sched *schedule.Client, rs *runs.Store, now time.Time, g schedule.Guard) (bool, error) {
	held, _, _, err := keyHolder(ctx, sched, rs, now, g)
	return held, err
}

// keyHolder is holdsKey that also reports whether the task is pending
// (its row is in the schedule), from the one read of the row, and the
// state of its run record when heldBy read one.
func keyHolder(ctx context.Context, sched *schedule.Client, rs *runs.Store, now time.Time, g schedule.Guard) (held, pending bool, ran RunState, err error) {
	if runs.ValidateID(g.Task) != nil {
		// A guard written by another language naming an id no run record
		// can bear: the mover sets such a row aside, so it holds nothing
		// (a review's find: the run store's refusal of the id stopped the
		// sweep and kept the key for good). Not schedule.ValidateID: a
		// requeued occurrence of a unique series takes the key as its run
		// id, "series@due", which the run record decides.
		return false, false, "", nil
	}
	it, err := sched.Get(ctx, g.Task)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false, false, "", err
	}
	// A lookup that gave up (schedule.ErrScanGaveUp: no id index, and
	// Options.ScanLimit rows read) counts as not pending, and the run
	// record decides: every task leasecron moved has lost its index row
	// and has a record. Only a row another language wrote with a unique
	// key, still pending past the scan's reach, is then taken for ended (a
	// known gap, in README; an error here instead kept every ended task's
	// key in a large schedule, a review's find).
	pending = err == nil
	held, ran, err = heldBy(ctx, rs, now, g, it, pending)
	return held, pending, ran, err
}

// heldBy is holdsKey once the task's row has been looked up: it, when
// pending. ran is the state of the task's run record when it read one
// ("" when it did not).
func heldBy(ctx context.Context, rs *runs.Store, now time.Time, g schedule.Guard, it Item, pending bool) (held bool, ran RunState, err error) {
	switch {
	case pending && it.Recurrence != "":
		return true, ran, nil // a series holds its key for as long as it lasts
	case pending && rs == nil:
		return g.Counts(RunScheduled), ran, nil
	case rs == nil:
		return now.Before(g.Created.Add(g.For)), ran, nil
	}
	r, err := rs.Get(ctx, g.Task)
	switch {
	case pending && (errors.Is(err, runs.ErrNotFound) || err == nil && !recordOf(r, it.Due)):
		// Not sent yet: its record, if any, is an earlier scheduling's.
		return g.Counts(RunScheduled), ran, nil
	case errors.Is(err, runs.ErrNotFound):
		// No record (or an expired one): nothing holds the key. A task
		// between its row and its record cannot be: the record is written
		// before the row goes.
		return false, ran, nil
	case err != nil:
		return false, "", fmt.Errorf("read run %s: %w", g.Task, err)
	}
	st := RunState(r.State)
	ran = st
	if st == RunDead && g.Requeue != "" && !slices.ContainsFunc(r.Requeued, func(d string) bool { return runs.RequeueToken(d) == g.Requeue }) &&
		now.Before(g.Created.Add(schedule.IndexingHold)) {
		// Dead, and its key taken by a requeue its record does not list:
		// that requeue is under way (schedule.Client.Retake takes the key
		// before the requeue marks the run queued again), or failed after
		// it took it. Held, for up to IndexingHold: taken over in between,
		// both tasks would run (issue 38, sweep seed 136364). The guard
		// names the requeue rather than being compared by time with the
		// death: those are two hosts' clocks (a review's find).
		return true, ran, nil
	}
	if r.WaitingForRate() && g.Counts(RunQueued) {
		// Put back for its type's rate limit, before its first attempt
		// or after one (a retry, or one handed back at a worker's
		// shutdown): still queued
		// as far as its key goes, though its run shows snoozed (issue 38,
		// the simulator's seed 14473: under "scheduled,queued,running" a
		// rated task waiting for its budget lost its key to another
		// task; row 99's last case, the hand-back).
		st = RunQueued
	}
	if !g.Counts(st) {
		return false, ran, nil
	}
	if mutate.On(mutate.UniqueEarly) && !r.Finished.IsZero() {
		return now.Before(r.Finished.Add(g.For)), ran, nil
	}
	// Only a finished run's end starts the window: a failed attempt
	// waiting for its retry, a snooze and a delivery handed back at
	// shutdown set Finished too, but their task is still live.
	if !st.Finished() || r.Finished.IsZero() || mutate.On(mutate.UniqueForever) {
		return true, ran, nil
	}
	return now.Before(r.Finished.Add(g.For)), ran, nil
}

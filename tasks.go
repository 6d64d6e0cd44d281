package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// CancelResult says what Cancel did.
type CancelResult struct {
	// ID is the task id.
	ID string
	// Removed is true when the task was still pending and its row was
	// deleted (a recurring series stops).
	Removed bool
	// Marked is true when the task had already been moved to the queue and
	// its run was marked cancelled: the worker that receives it
	// acknowledges it without running it. It is also true when the id's
	// run had ended but a scheduling of the id moved to the queue while
	// that run was under way was cancelled.
	Marked bool
}

// String says what the cancel did, as the CLI and the dashboard print it.
func (r CancelResult) String() string {
	if r.Removed {
		return "cancelled " + r.ID + " (removed from the schedule)"
	}
	return "cancelled " + r.ID + " (already in the queue: its run is marked cancelled, so the worker that receives it acknowledges it without running; a run a worker had already started goes on to its end)"
}

// Cancel stops a task: before it is moved its row is deleted; after, its
// run is marked cancelled. It returns ErrNotFound for an unknown id and
// ErrAlreadyFinished for a run that has already succeeded or died (unless
// a scheduling of the id moved while that run was under way is waiting
// behind it: that one is cancelled, Marked); a run already cancelled is
// success (Marked), so a cancel is idempotent.
func (c *Client) Cancel(ctx context.Context, id string) (CancelResult, error) {
	return c.cancel(ctx, id, nil)
}

// errNotSelected is a bulk cancel's refusal of a pending row of the id it
// listed that is no longer a task the operation selects.
var errNotSelected = errors.New("no longer selected")

// cancelOnly narrows a cancel to the task a bulk walk listed (issue 38,
// simulator row 91): a pending row of the id is removed only while selects
// says the operation still selects it (the id may have been scheduled
// again as another task since the walk read its row: errNotSelected);
// the run records are marked only where they are of the listed task's
// type, or hold a scheduling of its due time moved beside another run
// (runs.Store.CancelOf, CancelPendingOf) — not the run of another task of
// the id, before or after it.
type cancelOnly struct {
	listed  Item
	selects func(Item) bool
	// exact: the filter selects more than a type (a queue), which the
	// run records do not hold: only the listed scheduling's own record
	// (its due time) is marked.
	exact bool
}

// cancel is Cancel, narrowed by only when it is not nil.
func (c *Client) cancel(ctx context.Context, id string, only *cancelOnly) (CancelResult, error) {
	res := CancelResult{ID: id}
	steps := schedule.CancelSteps{First: func(ctx context.Context, row Item) error { return c.cancelWaitedFor(ctx, row, false) }}
	if only != nil {
		// The operation's filter is checked before anything is written:
		// a row of the id that is another task's now is left as it is
		// (its send mark too).
		steps.Check = func(row Item) error {
			if !only.selects(row) {
				return fmt.Errorf("cancel %s: %w: its pending row is of another task now (type %s, due %s)", id, errNotSelected, row.Type, row.Due.UTC().Format(time.RFC3339))
			}
			return nil
		}
		steps.First = func(ctx context.Context, row Item) error { return c.cancelWaitedFor(ctx, row, true) }
	}
	it, unsure, err := c.sched.CancelReport(ctx, id, steps)
	var refused error // the id's row is another task's: the listed one may have been moved
	// lookedFor: the delete of the one-off task's row may have committed
	// and the look that would tell failed (schedule.CancelReport). It is
	// taken as removed, so that its run is marked cancelled, and the
	// answer says the cancel may be done in part (issue 38, sweep seed
	// 151245: the task, gone from the schedule, stayed recorded queued).
	var lookedFor error
	switch {
	case err != nil && unsure && it.Recurrence == "" && !it.Waiting && c.runs != nil && !errors.Is(err, ErrNotFound):
		// (A task waiting for its parents has not been sent, and its
		// release would move a row left standing to a due time the mark
		// does not name: it is left to a cancel tried again.)
		lookedFor = err
		res.Removed = true
		c.tellLateWaiters(ctx, it)
	case err == nil:
		res.Removed = true
		c.tellLateWaiters(ctx, it)
	case only != nil && errors.Is(err, errNotSelected):
		refused = err
	case !errors.Is(err, ErrNotFound):
		return res, err
	}
	var forks []Item
	var forkErr error
	if res.Removed && it.Recurrence != "" {
		forks, forkErr = c.cancelForks(ctx, id, it, steps, false)
		switch {
		case errors.Is(forkErr, ErrAlreadySent):
			forkErr = fmt.Errorf("cancel %s: the series is cancelled, but another row of it written without an id index (an insert retried after the traffic cop moved it) was sent early and, with run records off, cannot be removed: it runs on: %w", id, forkErr)
		case forkErr != nil:
			forkErr = fmt.Errorf("cancel %s: %w: the series is cancelled, but another row of it written without an id index (an insert retried after the traffic cop moved it) could not be removed and may run: cancel it again: %w", id, ErrIncomplete, forkErr)
		}
	}
	if c.runs == nil {
		if !res.Removed {
			return res, fmt.Errorf("%w: no pending task %q (run records are off, so a task already moved to the queue cannot be cancelled)", ErrNotFound, id)
		}
		return res, forkErr
	}
	var occErr error
	if res.Removed && it.Recurrence != "" {
		// The series is gone either way. Occurrences a mover pass that
		// read the row before the delete may be moving are recorded
		// cancelled first, so that one sent after this returns does not
		// start (issue 38, sweep seed 29485: its mark came after the look
		// for moved occurrences below). An occurrence already moved to
		// the queue that could not be marked may still run once, which
		// the caller is told (issue 38, seed 6112: the read of a moved
		// occurrence's run failed, cancel answered success, and the
		// occurrence ran a minute later).
		c.stopMovingOccurrences(ctx, id, it)
		for _, fork := range forks {
			c.stopMovingOccurrences(ctx, id, fork)
		}
		occErr = c.cancelMovedOccurrences(ctx, id, onlyType(only != nil, it))
	}
	// Record the run cancelled too: the row may have been moved while we
	// deleted it, and status then says what became of the task.
	var rerr error
	var marked runs.Run
	if res.Removed && it.Recurrence == "" {
		var unfinished runs.Run
		if only != nil {
			unfinished, rerr = c.runs.CancelPendingOf(ctx, id, runs.Meta{Type: it.Type, Due: it.Due})
		} else {
			unfinished, rerr = c.runs.CancelPending(ctx, id, runs.Meta{Type: it.Type, Due: it.Due})
		}
		c.cancelledFlow(ctx, unfinished)
	} else if only != nil && !res.Removed {
		if only.listed.Recurrence != "" {
			// A listed series whose row is gone or another's has nothing
			// left that the operation selected.
			return res, cmp.Or(refused, fmt.Errorf("%w: series %q is no longer pending", ErrNotFound, id))
		}
		marked, rerr = c.runs.CancelOf(ctx, id, runs.Meta{Type: only.listed.Type, Due: only.listed.Due}, only.exact || refused != nil)
		if refused != nil && errors.Is(rerr, runs.ErrNotFound) {
			return res, refused
		}
	} else {
		marked, rerr = c.runs.Cancel(ctx, id)
	}
	switch {
	case rerr == nil:
		res.Marked = !res.Removed
		if res.Marked && marked.State == runs.Cancelled {
			// (A run that had ended otherwise: the cancel reached only
			// schedulings of the id moved beside it, whose workers tell
			// what waits for them as they refuse them.)
			c.cancelledFlow(ctx, marked)
		}
	case errors.Is(rerr, runs.ErrNotFound):
		if !res.Removed {
			return res, fmt.Errorf("%w: no pending task or run with id %q", ErrNotFound, id)
		}
	case errors.Is(rerr, runs.ErrAlreadyFinished):
		// For a one-off task removed, a run of the row's very due time
		// that has finished (the only one CancelPending refuses) says the
		// row's message had run: a delete whose answer was lost is taken
		// for ours when the row is gone, and a row a traffic-cop pass
		// sent but did not mark or retire (it stopped between the two)
		// looks pending behind a message that ran (issue 38, row 113:
		// cancel answered success for a task that had died). Its end
		// stands: refused, as the README says of one that succeeded or
		// died. (A series removed is cancelled whatever an earlier
		// one-off task of its id left on the record.)
		if !res.Removed || it.Recurrence == "" {
			res.Removed = false
			return res, rerr
		}
	default:
		if !res.Removed {
			return res, rerr
		}
		if it.Recurrence == "" {
			// The mover may have sent the task early and confirmed it on
			// its run as the cancel removed its row: only the record's
			// mark stops that message (issue 38, the simulator's seed
			// 8379: the mark failed, cancel answered success, and the task
			// ran five seconds later). A cancel tried again finds the row
			// gone and marks the run.
			removed := "is removed from the schedule"
			if lookedFor != nil {
				removed = "may be removed from the schedule (" + lookedFor.Error() + ")"
			}
			return res, fmt.Errorf("cancel %s: %w: the task %s, but its run record could not be marked cancelled, and if it was being moved to the queue as it was cancelled it may still run once; cancel it again (an answer of not found then means nothing was left to stop): %w", id, ErrIncomplete, removed, rerr)
		}
		c.o.Logger.Warn("run record not marked cancelled", "task_id", id, "err", rerr)
	}
	if lookedFor != nil {
		return res, fmt.Errorf("cancel %s: %w: its run record is marked cancelled, so it does not run, but its row may still be listed pending until it is moved; cancel it again to remove it: %w", id, ErrIncomplete, lookedFor)
	}
	if occErr != nil {
		occErr = fmt.Errorf("cancel %s: %w: the series is cancelled, but an occurrence already moved to the queue may still run once (`leasecron runs --series %s --state queued`, or `--state snoozed`, lists it; cancel it by its id): %w", id, ErrIncomplete, id, occErr)
	}
	if err := errors.Join(forkErr, occErr); err != nil {
		return res, err
	}
	return res, nil
}

// cancelledFlow tells what waits for the run r, just marked cancelled
// after its move, and its batch, that it ended cancelled — at once, as for
// a pending task (cancelWaitedFor), rather than only when its worker
// acknowledges the message or its handler returns: by then the id may have
// been scheduled again and its record be the new task's, and the batch
// and children never heard of this end (issue 38, seed 1123: a batch's
// callback waited for good). Both are counted once per task, so the
// worker's own report later changes nothing. What cannot be told here
// goes in a message of its own (sendEnded).
func (c *Client) cancelledFlow(ctx context.Context, r runs.Run) {
	if r.ID == "" {
		return // none
	}
	var failed []error
	// What is still to be told: what waits for the id, and the batch
	// (when the batch could not be read, whether the run is its member
	// or its callback is the worker's to find out).
	var waiters, batch bool
	if r.Batch != "" {
		// A callback carries its batch too; only a member counts.
		switch b, err := c.runs.GetBatch(ctx, r.Batch); {
		case err == nil && b.Callback != r.ID:
			if err := c.memberEnded(ctx, r.Batch, r.ID, RunCancelled); err != nil {
				failed, batch = append(failed, err), true
			}
		case err != nil && !errors.Is(err, runs.ErrNoBatch):
			failed, batch = append(failed, fmt.Errorf("read batch %s: %w", r.Batch, err)), true
		}
	}
	if r.EndOfID(c.o.Clock.Now()) {
		if err := c.parentEnded(ctx, r.ID, RunCancelled); err != nil {
			failed, waiters = append(failed, err), true
		}
	} else {
		// Another scheduling of the id moved beside this run is still to
		// start (a bulk cancel leaves those): what waits for the id waits
		// for that one, through the traffic cop's watch, as a worker's
		// end does. (Not a telling in a message: by the time it came,
		// that scheduling may have the record, and the telling would end
		// the id for what waits for it.)
		sctx, cancel := settleContext(ctx)
		err := retry.Transient(sctx, retry.Policy{Clock: c.o.Clock}, func(ctx context.Context) error {
			return c.runs.WatchParents(ctx, []string{r.ID})
		})
		cancel()
		if err != nil {
			c.o.Logger.Warn("watching the id of a cancelled task failed; its worker has it watched when its message comes back", "task_id", r.ID, "err", err)
		}
	}
	if waiters || batch {
		c.sendEnded(ctx, r, waiters, batch, RunCancelled, errors.Join(failed...))
	}
}

// sendEnded sends the end st of the run r, which the tasks waiting for
// its id (waiters) or its batch (batch) could not be told (cause), in a
// message of its own that only tells them (queue.Envelope.EndOnly), to the
// queue its type is routed to: whichever worker receives it tells them,
// trying again until that succeeds. Left to the run's own message instead,
// the end was lost when the id was scheduled again before that message
// came back: an early-sent message is then found stale against the new
// row and acknowledged untold (issue 38, row 254: a member cancelled while
// it waited for its retry; the batch's callback never ran). When it is
// not known whether the run is its batch's member or its callback, the
// worker reads the batch first (taskEnded). The send is tried again
// through faults that pass, whether or not the caller has gone; one that
// fails all the same is logged: the run's own message is then all that is
// left to tell them.
func (c *Client) sendEnded(ctx context.Context, r runs.Run, waiters, batch bool, st RunState, cause error) {
	env := queue.Envelope{ID: r.ID, Type: r.Type, Due: r.Due, Waiters: waiters, Ended: st, EndOnly: true, EndedAt: c.o.Clock.Now().UTC()}
	if batch {
		env.Batch = r.Batch
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	err := retry.Transient(ctx, retry.Policy{Clock: c.o.Clock}, func(ctx context.Context) error {
		return c.queue.Enqueue(ctx, env, 0)
	})
	if err != nil {
		c.o.Logger.Warn("telling the batch and the tasks waiting for a cancelled task failed, and so did sending its end in a message of its own; its worker tells them when its message comes back, unless the id has been scheduled again by then",
			"task_id", r.ID, "batch", r.Batch, "err", errors.Join(cause, err))
		return
	}
	c.o.Logger.Info("telling the batch and the tasks waiting for a cancelled task failed; its end goes to them in a message of its own",
		"task_id", r.ID, "batch", r.Batch, "err", cause)
}

// Reschedule moves a pending task to a new due time atomically.
func (c *Client) Reschedule(ctx context.Context, id string, due time.Time) (Item, error) {
	return c.sched.Reschedule(ctx, id, due)
}

// Disable stops a recurring series without deleting it: its row, rule,
// zone and payload stay, and no occurrence runs until Enable (`leasecron
// disable ID`). Status shows it "disabled" with the occurrence it had
// next. A one-off task is refused with ErrInvalidTask; an unknown id
// wraps ErrNotFound; disabling twice changes nothing. Occurrences already
// sent early are skipped by the workers (with run records on; without
// them Disable refuses with ErrAlreadySent). An error wrapping
// ErrIncomplete means the series is disabled but a storage error kept an
// occurrence already in the queue from being stopped (disable it again),
// or kept another row of a series written without an id index from
// being removed (the error says to cancel the series).
func (c *Client) Disable(ctx context.Context, id string) (Item, error) {
	return c.disable(ctx, id, nil)
}

// disable is Disable, refused with the error check returns for the row it
// would disable (nil: none): a bulk disable acts only on a series its
// filter still selects at the moment of the write, not on whatever the
// id holds by then.
func (c *Client) disable(ctx context.Context, id string, check func(Item) error) (Item, error) {
	// Another row of a series written without an id index (row 241):
	// removed, the series left whole in the row disabled. A repeat of the
	// disable cannot finish that job (it would meet the live row first and
	// fail to re-key it onto the disabled one), so a failure says to
	// cancel.
	forksOf := func(it Item) ([]Item, error) {
		forks, err := c.cancelForks(ctx, id, it, schedule.CancelSteps{Check: check}, true)
		switch {
		case errors.Is(err, ErrAlreadySent):
			err = fmt.Errorf("disable %s: the series is disabled, but another row of it written without an id index (an insert retried after the traffic cop moved it) was sent early and, with run records off, cannot be removed: it runs on; cancel the series to stop it: %w", id, err)
		case err != nil:
			err = fmt.Errorf("disable %s: %w: the series is disabled, but another row of it written without an id index (an insert retried after the traffic cop moved it) could not be removed and may run; a repeat of the disable cannot reach it: cancel the series to stop it: %w", id, ErrIncomplete, err)
		}
		return forks, err
	}
	if c.runs == nil {
		it, _, err := c.sched.DisableMovingIf(ctx, id, 0, check)
		if err != nil {
			return it, err
		}
		_, err = forksOf(it)
		return it, err
	}
	it, stopped, err := c.sched.DisableMovingIf(ctx, id, c.moving(), check)
	if err != nil {
		return it, err
	}
	// Occurrences a mover may be moving right now: recorded cancelled, so
	// that one sent after this returns is acknowledged without running.
	// (Not reported as ErrIncomplete: a disable tried again finds the
	// series disabled already and stops nothing more this way.)
	c.stopOccurrences(ctx, id, it.Type, stopped)
	forks, forkErr := forksOf(it)
	for _, fork := range forks {
		c.stopMovingOccurrences(ctx, id, fork)
	}
	// The series is disabled; an occurrence already in the queue may not
	// be: a disable tried again finishes the job, finding it moved (issue
	// 38, seed 1235: the lookup failed, disable answered success, and the
	// occurrence ran 10 s later).
	if err := c.cancelMovedOccurrences(ctx, id, onlyType(check != nil, it)); err != nil {
		return it, errors.Join(forkErr, fmt.Errorf("disable %s: %w: the series is disabled, but occurrences already moved to the queue may still run once; disable it again: %w", id, ErrIncomplete, err))
	}
	return it, forkErr
}

// stopOccurrences records the runs of the occurrences of series due at
// dues cancelled unless they started (runs.Store.CancelUnstarted): a
// mover pass that read the series' row before it was disabled or
// removed, and marks and sends one of them after, sends a run that is
// acknowledged without running. A fault that passes is tried again
// (issue 38, seed 73944: one 503 left an occurrence to run); a failure
// is logged: that occurrence may then run once.
func (c *Client) stopOccurrences(ctx context.Context, series, typ string, dues []time.Time) {
	for _, due := range dues {
		err := retry.Transient(ctx, retry.Policy{Tries: 3, Clock: c.o.Clock}, func(ctx context.Context) error {
			return c.runs.CancelUnstarted(ctx, runs.OccurrenceID(series, due), runs.Meta{Type: typ, Due: due})
		})
		if err != nil {
			c.o.Logger.Warn("cannot stop an occurrence a mover may be moving; it may still run once", "series", series, "due", due, "err", err)
		}
	}
}

// maxForks bounds how many more rows of a series written without an id
// index one cancel removes (cancelForks).
const maxForks = 4

// errNotFork refuses, in cancelForks, a row of the id that is not a
// series written without an id index.
var errNotFork = errors.New("not another row of the series")

// cancelForks removes the other rows of it, a series written without an
// id index (another language's client, straight into the table) that a
// cancel removed, and returns them. Such a writer's insert retried by its
// SDK after the traffic cop had moved the row on writes the moved row
// again beside its successor, and the cancel's scan finds one of the two:
// left, the other runs its next occurrence (issue 38, sweep seed 146736).
// Only unindexed series rows of the id are removed, as steps allow: the
// look stops at the first row of the id that is not one (a one-off
// row, an indexed task, a row a bulk operation's filter does not select)
// or that its scan does not reach within Options.ScanLimit. The error is
// a storage failure that left such a row, which may run.
//
// A disable removes those not disabled (keepDisabled): the row it
// disabled is re-keyed to the end of time, so its scans meet the others
// first, and the series stays whole in that row.
func (c *Client) cancelForks(ctx context.Context, id string, it Item, steps schedule.CancelSteps, keepDisabled bool) ([]Item, error) {
	if it.Indexed || it.Recurrence == "" {
		return nil, nil
	}
	more := steps
	more.Check = func(row Item) error {
		if row.Indexed || row.Recurrence == "" || keepDisabled && !row.Disabled.IsZero() {
			return errNotFork
		}
		if steps.Check != nil {
			return steps.Check(row)
		}
		return nil
	}
	var forks []Item
	for range maxForks {
		fork, _, err := c.sched.CancelReport(ctx, id, more)
		switch {
		case errors.Is(err, ErrNotFound) || errors.Is(err, errNotFork) || errors.Is(err, errNotSelected):
			return forks, nil
		case err != nil:
			return forks, err
		}
		c.tellLateWaiters(ctx, fork)
		forks = append(forks, fork)
	}
	return forks, nil
}

// stopMovingOccurrences stops the occurrences a mover pass may be moving
// of the series it, whose row a cancel has just removed
// (schedule.MovingOccurrences, stopOccurrences).
func (c *Client) stopMovingOccurrences(ctx context.Context, series string, it Item) {
	dues, err := schedule.MovingOccurrences(it, c.o.Clock.Now(), c.moving())
	if err != nil {
		c.o.Logger.Warn("cannot tell which occurrences a mover may be moving of a cancelled series; one may still run once", "series", series, "err", err)
		return
	}
	c.stopOccurrences(ctx, series, it.Type, dues)
}

// moving is how far ahead a mover pass reading a series' row sends its
// occurrences without a token (its retire window, at most a pass and the
// time passes take), with the clocks' skew: twice the mover's poll
// interval (SendWithin is set to it; at least the default) and 2 s.
func (c *Client) moving() time.Duration {
	return 2*max(c.o.SendWithin, schedule.DefaultPollEvery) + 2*time.Second
}

// onlyType is the type a bulk operation's change of a series (narrowed)
// reaches among the occurrences already moved: the series' own, as the
// operation found its row, not those of an earlier series of the id of
// another type; "" (all of them) for a change by hand.
func onlyType(narrowed bool, it Item) string {
	if narrowed {
		return it.Type
	}
	return ""
}

// cancelMovedOccurrences cancels the runs of series' occurrences that the
// mover has already moved to the queue and that have not started (their
// records are queued, or snoozed before any attempt: put back to wait for
// a rate limit), as Cancel does for a one-off task moved before it was
// cancelled: once a series is disabled or cancelled none of its
// occurrences starts afresh. (Occurrences sent early but not moved yet
// are stale once the row changed; the workers check those against the
// row.) It costs two queries per run-record partition, and a write per
// such occurrence. typ, when not empty, keeps it to occurrences of that
// type (onlyType). A failure is logged and returned (Disable fails, and
// a disable tried again finishes the job; Cancel logs it): that
// occurrence may then run once.
func (c *Client) cancelMovedOccurrences(ctx context.Context, series, typ string) error {
	if c.runs == nil {
		return nil
	}
	var errs []error
	for _, st := range []runs.State{runs.Queued, runs.Snoozed} {
		q := runs.Query{State: st, Series: series, Type: typ, Limit: runs.MaxLimit}
		for {
			var page runs.Page
			err := retry.Transient(ctx, retry.Policy{Tries: 3, Clock: c.o.Clock}, func(ctx context.Context) error {
				var err error
				page, err = c.runs.Query(ctx, q)
				return err
			})
			if err != nil {
				c.o.Logger.Warn("cannot look for occurrences already moved to the queue; they may still run once", "series", series, "state", st, "err", err)
				errs = append(errs, fmt.Errorf("look for %s occurrences: %w", st, err))
				break
			}
			for _, r := range page.Runs {
				if st == runs.Snoozed && r.Attempts > 0 {
					continue // snoozed by its handler: it carries on as a retry would
				}
				err := retry.Transient(ctx, retry.Policy{Tries: 2, Clock: c.o.Clock}, func(ctx context.Context) error {
					_, err := c.runs.Cancel(ctx, r.ID)
					return err
				})
				if err != nil && !errors.Is(err, runs.ErrAlreadyFinished) && !errors.Is(err, runs.ErrNotFound) {
					c.o.Logger.Warn("cannot cancel an occurrence already moved to the queue; it may still run once", "run", r.ID, "err", err)
					errs = append(errs, fmt.Errorf("cancel %s: %w", r.ID, err))
				}
			}
			if page.Continue == "" {
				break
			}
			q.Continue = page.Continue
		}
	}
	return errors.Join(errs...)
}

// Enable runs a disabled series again (`leasecron enable ID`) from its next
// occurrence after now: the one it had when disabled if still ahead,
// else the first of its rule after now; occurrences that fell due while
// it was disabled do not run. A series that is not disabled is left as
// it is.
func (c *Client) Enable(ctx context.Context, id string) (Item, error) {
	return c.sched.Enable(ctx, id)
}

// Get returns a pending task.
func (c *Client) Get(ctx context.Context, id string) (Item, error) {
	it, err := c.sched.Get(ctx, id)
	return it, err
}

// GetIndexed is Get without the scan for a task written as a row without
// an id index (by another program, the table contract): a few point reads
// however many tasks are pending, where Get's miss costs a query per
// 1,000 pending tasks. Such a task is not found (ErrNotFound). For a
// check before writing a task with an id, which leasecron always indexes.
func (c *Client) GetIndexed(ctx context.Context, id string) (Item, error) {
	return c.sched.GetIndexed(ctx, id)
}

// ListOptions select and page List (see schedule.ListOptions).
type ListOptions = schedule.ListOptions

// ListPage is one page of pending tasks.
type ListPage struct {
	// Items are the pending tasks, in due order.
	Items []Item
	// Continue, when not empty, fetches the next page
	// (ListOptions.Continuation).
	Continue string
}

// List returns a page of pending tasks in due order. A nil *ListOptions
// lists the first page of every task.
func (c *Client) List(ctx context.Context, o *ListOptions) (ListPage, error) {
	if o == nil {
		o = &ListOptions{}
	}
	items, next, err := c.sched.List(ctx, *o) // a missing table lists as empty
	return ListPage{Items: items, Continue: next}, err
}

// Status is what is known about a task id: its pending row and/or its run
// record.
type Status struct {
	// ID is the task id.
	ID string
	// Pending is the scheduled row, if the task is still in the table.
	Pending *Item
	// Run is the run record, if there is one.
	Run *Run
}

// StateDisabled is what Status.State says of a disabled series (Disable).
const StateDisabled = "disabled"

// StateWaiting is Status.State of a pending task waiting for other tasks
// (Item.After) or, a batch's completion callback, for its batch.
const StateWaiting = "waiting"

// State summarises Status in one word: the run's state, or "scheduled"
// ("disabled" for a disabled series).
func (s Status) State() string {
	switch {
	case s.Run != nil && (s.Pending == nil || (s.Run.State != runs.Scheduled && s.Run.State != runs.Queued)):
		// While its row is still in the schedule a task is scheduled, even
		// if the mover has just recorded its run as queued before sending.
		return string(s.Run.State)
	case s.Pending != nil && !s.Pending.Disabled.IsZero():
		return StateDisabled
	case s.Pending != nil && s.Pending.Waiting:
		return StateWaiting
	case s.Pending != nil:
		return string(runs.Scheduled)
	}
	return "unknown"
}

// Status looks a task id up in the schedule and in the run records.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	return c.status(ctx, id, c.sched.Get)
}

// StatusIndexed is Status through the id index alone, as GetIndexed is
// Get: a few point reads whatever the schedule holds, where Status's miss
// scans it for a row written without an index (by another program).
func (c *Client) StatusIndexed(ctx context.Context, id string) (Status, error) {
	return c.status(ctx, id, c.sched.GetIndexed)
}

// status is Status, reading the pending task with get.
func (c *Client) status(ctx context.Context, id string, get func(context.Context, string) (Item, error)) (Status, error) {
	st := Status{ID: id}
	it, err := get(ctx, id)
	switch {
	case err == nil:
		st.Pending = &it
	case !errors.Is(err, ErrNotFound):
		return st, err
	}
	// A one-off task whose row says nothing of a send may still have a
	// run once it is due: a traffic-cop pass sends before it marks or
	// retires the row, and one stopped between the two leaves the row
	// behind a message that ran (issue 38, row 113). Only a record of the
	// row's very due time is its run then. A row due later, a series'
	// row and a task parked waiting for its parents have none: a record
	// under their id is of an earlier task with the id (and looking would
	// cost a read).
	unmarked := st.Pending != nil && !st.Pending.Sent && st.Pending.SendingUntil.IsZero()
	if c.runs != nil && (!unmarked || schedule.MayHaveRun(*st.Pending, c.o.Clock.Now())) {
		r, err := c.runs.Get(ctx, id)
		switch {
		case err == nil && (!runOf(st.Pending, r) || unmarked && !recordOf(r, st.Pending.Due)):
			// An earlier scheduling's record: the pending task has none
			// yet (issue 38, seed 1163: a task scheduled again and sent
			// early showed its predecessor's "cancelled").
		case err == nil:
			pr := r.Public()
			st.Run = &pr
		case errors.Is(err, runs.ErrExpired) && st.Pending == nil:
			return st, err
		case !errors.Is(err, runs.ErrNotFound):
			return st, err
		}
	}
	if st.Pending == nil && st.Run == nil {
		return st, fmt.Errorf("%w: no pending task or run with id %q", ErrNotFound, id)
	}
	return st, nil
}

// runOf reports whether r is the run record of the pending task it (nil:
// nothing pending): a record of another due time than a one-off pending
// row is an earlier scheduling's (the id was scheduled again once it
// ended, or rescheduled). A record without a due time is taken for it.
func runOf(it *Item, r runs.Run) bool {
	return it == nil || it.Recurrence != "" || r.OfDue(it.Due)
}

// recordOf reports whether r is the record of the run of due — unlike
// runOf, not when r is an earlier release's record, which knows no due
// time: what a task's row decides from its run (its unique key, the look
// behind a parent's mark) it must not decide from an old record.
func recordOf(r runs.Run, due time.Time) bool {
	return !r.Due.IsZero() && r.OfDue(due)
}

// Payload reads a payload kept in a blob (Item.PayloadBlob, a claim-check
// reference) and returns its bytes.
func (c *Client) Payload(ctx context.Context, ref string) ([]byte, error) {
	return c.payloads.Get(ctx, ref)
}

// RunNow makes a pending task due now; for a recurring series its next
// occurrence runs now and the series continues from there. It is
// Reschedule to the current time.
func (c *Client) RunNow(ctx context.Context, id string) (Item, error) {
	now := c.o.Clock.Now()
	var o schedule.RescheduleOptions
	if c.sendsNow(Item{Due: now}, now) && c.takeSends(ctx, 1) == 1 {
		o.Sending = now.Add(sendGrace) // one-off tasks only; a series ignores it
	}
	it, err := c.sched.RescheduleWith(ctx, id, now, o)
	// Sent by RunNow only if the row holds the SendingUntil it wrote: a row
	// it did not change (nothing to change) is being sent by whoever wrote
	// its SendingUntil, and a second sender of one row version makes two
	// confirmations of one run race, the loser taking back the winner's
	// (issue 38, seed 6183: a ScheduleMany and a RunNow of the same task,
	// both slowed, sent it from one version; the task never ran).
	if err != nil || o.Sending.IsZero() || it.Recurrence != "" || !it.SendingUntil.Equal(o.Sending.UTC()) {
		return it, err
	}
	c.sendNow(ctx, it)
	return it, nil
}

// ScheduleOptions modify Schedule. A nil *ScheduleOptions is the zero value.
type ScheduleOptions struct {
	// Replace overwrites a pending task with the same id (atomically)
	// instead of refusing it with ErrAlreadyScheduled.
	Replace bool
	// Unique, when set, creates the task only if no other task of its type
	// holds Unique.Key; otherwise Schedule writes nothing and returns that
	// task's id with an error wrapping ErrDuplicate (a *DuplicateError).
	// It cannot be combined with Replace.
	Unique *Unique
}

// Schedule adds a task and returns it as stored (with its generated ID
// when it had none). An id that is already pending is refused with
// ErrAlreadyScheduled unless o.Replace; input the schedule cannot take is
// refused with ErrInvalidTask before anything is written. With o.Unique, a
// task whose key another task holds is not created: the answer is that
// task's id and an error wrapping ErrDuplicate.
func (c *Client) Schedule(ctx context.Context, it Item, o *ScheduleOptions) (Item, error) {
	if o == nil {
		o = &ScheduleOptions{}
	}
	if o.Replace && it.Batch == "" && !it.Callback {
		b, err := c.memberOf(ctx, it.ID)
		if err != nil {
			return Item{}, err
		}
		it.Batch = b
	}
	if len(it.After) > 0 {
		return c.scheduleAfter(ctx, it, o)
	}
	return c.scheduleRow(ctx, it, o)
}

// memberOf returns the batch whose live member id is ("" when none): a
// task that replaces a batch member takes its place in the batch, so
// that the batch hears of the replacement's end — the member it replaces
// never ends on its own (its message is acknowledged as superseded), and
// the batch's callback waited for good (issue 38, seed 8). A member whose
// run has ended was counted already: what replaces it is a task of its
// own. One point read, or two, per replace.
func (c *Client) memberOf(ctx context.Context, id string) (string, error) {
	if c.runs == nil {
		return "", nil
	}
	st, err := c.Status(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	case st.Pending != nil:
		if st.Pending.Callback {
			return "", nil
		}
		return st.Pending.Batch, nil
	case st.Run != nil && !st.Run.State.Finished():
		return st.Run.Batch, nil
	}
	return "", nil
}

package schedule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// Cancel deletes the pending task with this id (a recurring series stops)
// together with its index row, atomically, and then its payload blob. It
// returns the item as it was. Unknown ids fail with ErrNotFound. A run
// already moved to the queue is not recalled; a message sent early (the row
// is still here, Item.Sent) becomes a no-op for workers that check it
// (Options.ChangesAfterSend), and without them Cancel refuses with
// ErrAlreadySent.
func (c *Client) Cancel(ctx context.Context, id string) (Item, error) {
	return c.CancelWith(ctx, id, nil)
}

// CancelWith is Cancel with CancelSteps{First: first}.
func (c *Client) CancelWith(ctx context.Context, id string, first func(ctx context.Context, it Item) error) (Item, error) {
	it, _, err := c.CancelReport(ctx, id, CancelSteps{First: first})
	return it, err
}

// toldErr is err of a cancel that stops after others may have heard that
// the task was cancelled: the row stays held (until, when known).
func toldErr(err error, until time.Time) error {
	held := "its row stays held from the workers for a while"
	if !until.IsZero() {
		held = "its row is held from the workers until " + until.Format(time.RFC3339)
	}
	return fmt.Errorf("%w (the task's batch and the tasks waiting for it may have been told that it was cancelled: cancel it again; %s)", err, held)
}

// ErrNoneTold is wrapped by an error of CancelSteps.First that told
// nobody of the task's end: the cancel then undoes its hold on the row. Any
// other error of First is taken to have told some, and the row stays held
// (CancelHold) for a cancel tried again.
var ErrNoneTold = errors.New("nobody was told of its end")

// CancelSteps are what a cancel (CancelReport) does beside removing the
// task's row.
type CancelSteps struct {
	// Check, when set, is called with the task as found (again after a
	// conflict) before anything is written; an error stops the cancel,
	// with nothing written.
	Check func(it Item) error
	// First, when set, is called with the task as found before its row
	// is deleted (again after a conflict: it must be idempotent); an
	// error stops the cancel, with nothing deleted. When others hear of
	// the end of a one-off task (Item.EndHeard), its row is held first
	// (holdForCancel): the mover leaves it alone for CancelHold, and the
	// send mark of a message sent early, or being sent by its client, is
	// taken back, so that message is stale from then on even if the
	// delete is slow (one whose message was checked against its row just
	// before may still run). Both are undone when First fails with an
	// error wrapping ErrNoneTold; after any other error of First, the row
	// stays held for CancelHold.
	First func(ctx context.Context, it Item) error
}

// holdForCancel holds the row of a one-off task whose end others hear of
// (Item.EndHeard) before a cancel tells them that the task ended, in one
// write conditional on the row as read:
//
//   - The mover leaves the row alone until CancelHold from now
//     (PropCancelling). Moved while the cancel tells, the task would run
//     though its batch and the tasks waiting for it heard that it was
//     cancelled, and the cancel, finding the row gone, would answer that
//     it had done nothing (issue 38, seed 16778: a replacement scheduled
//     beside its id's running run was moved while the cancel's delete was
//     slowed; its run record, another scheduling's, could not refuse it).
//   - The send mark of a message sent (Sent) or being sent by its client
//     (SendingUntil, not marked yet) is taken back: that message, checked
//     against the row (Current) while the cancel is under way, is then
//     stale — the token is gone, and the row is no longer as the client
//     read it — and is acknowledged without running (simulator row 98: a
//     batch member's replacement, sent by its client, ran after the
//     cancel had told its batch it was cancelled, because the cancel's
//     delete was slowed). SendingUntil stays, so the mover still leaves
//     the row to its client until then.
//
// It returns the row as written (its new ETag), or as it was when nobody
// hears of the end (a series keeps its marks: its sent occurrences are
// cancelled through their run records).
func (c *Client) holdForCancel(ctx context.Context, row table.Entity) (table.Entity, error) {
	if row.Props.Str(PropRecurrence) != "" || !readItem(row).EndHeard() {
		return row, nil
	}
	props := table.Props(row.Props).Clone()
	for _, k := range sendMarks {
		props.Delete(k)
	}
	props[PropCancelling] = c.opts.Clock.Now().Add(CancelHold).UTC().Format(time.RFC3339Nano)
	written, err := c.rewrite(ctx, row, props)
	if err != nil {
		return row, fmt.Errorf("hold the row for the cancel: %w", err)
	}
	return written, nil
}

// rewrite replaces row's properties with props, conditional on row's
// ETag, and returns the row as written (its new ETag).
func (c *Client) rewrite(ctx context.Context, row table.Entity, props table.Props) (table.Entity, error) {
	etags, err := c.t.Submit(ctx, []table.Op{{Kind: table.Replace, PartitionKey: row.PartitionKey, RowKey: row.RowKey, Props: props, IfMatch: row.ETag}})
	if err != nil {
		return row, err
	}
	return table.Entity{PartitionKey: row.PartitionKey, RowKey: row.RowKey, Props: props, ETag: etagAt(etags, 0)}, nil
}

// sendMarks are the properties of a one-off task's send mark, which a
// cancel takes back (holdForCancel) and may put back (release).
var sendMarks = []string{PropSent, PropConfirmed}

// sentMarks are the send marks of row that holdForCancel removes.
func sentMarks(row table.Entity) table.Props {
	marks := table.Props{}
	for _, k := range sendMarks {
		if v, ok := row.Props[k]; ok {
			marks[k] = v
		}
	}
	return marks
}

// release undoes holdForCancel when a cancel stops before First told
// anyone (First failed, or the cancel gave up first): the row stays pending, the mover
// may move it at once, and the send marks taken back are put back, since
// what reads them (a reschedule or run-now refusing a task whose message
// started, a replace taking its confirmation back, the mover) must find
// them. Only while the row is as the hold left it (wrote, its ETag); a
// row written since, or a hold whose answer was lost, is left as it is
// (the mover moves it once CancelHold has passed), and a failure is
// logged. (A row being sent had no mark to put back: its client's mark
// is refused, and the mover moves the row once its SendingUntil passes.)
func (c *Client) release(ctx context.Context, id string, row table.Entity, wrote string, taken table.Props) {
	if wrote == "" || row.ETag != wrote {
		return
	}
	props := table.Props(row.Props).Clone()
	props.Delete(PropCancelling)
	maps.Copy(props, taken)
	if _, err := c.rewrite(ctx, row, props); err != nil {
		c.opts.Logger.Warn("a cancel that stopped could not release the task's row it held; the mover moves it once the hold has passed, and sends it again if it was sent, which its run record refuses to run twice", "task_id", id, "err", err, "held_until", readItem(row).CancellingUntil)
	}
}

// CancelReport is Cancel with steps, also telling whether the cancel is unsure
// that it removed the row: its delete failed without saying whether it
// committed (a lost answer: the SDK's retry met no row, or the request
// timed out), and the row is gone since. The delete is then taken for
// ours, as it would have been had its answer come back (issue 38, seed
// 1164: a cancel answered "not found" and its task, cancelled, was taken
// for lost) — but the mover may have moved the row instead, so the caller
// checks the run (a run of its due time that already finished means the
// task ran), and a large payload's blob is left to its retention. When
// looking the task up again fails, the cancel answers that error with
// unsure set and the row it tried to delete: the task may be removed.
func (c *Client) CancelReport(ctx context.Context, id string, steps CancelSteps) (it Item, unsure bool, err error) {
	var lastErr error
	// wrote is the ETag the hold of the row left it with (holdForCancel),
	// and taken the send marks it removed: while the row still has that
	// ETag the hold stands, and it is undone when the cancel stops before
	// First has told anyone (release).
	var wrote string
	var taken table.Props
	// told: First, with the row held, may have told others of the task's
	// end, so the hold is not undone when the cancel stops (release).
	var told bool
	// tried is the row of a delete that failed without saying whether it
	// committed. A refusal because the row had changed (a precondition
	// failed) says ours did not, and clears it.
	var tried *table.Entity
	for try := 0; ; try++ {
		f, orphan, err := c.locate(ctx, id)
		if err != nil {
			if tried != nil && errors.Is(err, ErrNotFound) {
				return readItem(*tried), true, nil
			}
			if tried != nil {
				// Our delete may have committed, and the look that would
				// tell failed: tried again while tries are left, else the
				// row is returned with the error, for the caller to treat
				// the task as perhaps removed (issue 38, sweep seed
				// 151245: the delete committed, the scan that followed
				// failed, and cancel answered a plain lookup error that
				// left the task, gone from the schedule, recorded queued
				// for good).
				if storage.IsTransient(err) && try < retries {
					lastErr = err
					continue
				}
				err = fmt.Errorf("cancel %s: its delete failed without saying whether it committed, and looking the task up again failed: %w", id, err)
				if told {
					err = toldErr(err, readItem(*tried).CancellingUntil)
				}
				return readItem(*tried), true, err
			}
			if orphan != nil && errors.Is(err, ErrNotFound) && !indexing(*orphan, c.opts.Clock.Now()) {
				// Tidy a stale index row (not one whose row an AddMany
				// under way is still to write); a failure here changes
				// nothing.
				_, _ = c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: orphan.PartitionKey, RowKey: orphan.RowKey, IfMatch: orphan.ETag}})
			}
			if told && !errors.Is(err, ErrNotFound) {
				return Item{}, false, toldErr(err, time.Time{})
			}
			return Item{}, false, err
		}
		stop := func(err error) (Item, bool, error) {
			if told {
				// They may have heard of its end: the row stays held, so
				// that the task does not run meanwhile, for a cancel tried
				// again.
				return Item{}, false, toldErr(err, readItem(f.row).CancellingUntil)
			}
			c.release(ctx, id, f.row, wrote, taken)
			return Item{}, false, err
		}
		if try == retries {
			return stop(fmt.Errorf("cancel %s: still failing after %d attempts: %w", id, retries, lastErr))
		}
		// hold writes the hold on the row (holdForCancel), or renews it
		// once half of it has passed (telling many dependents, or a slow
		// delete, can take long); a row written by another since the
		// last hold is held again. taken keeps the send marks of the row
		// before the first hold: a row already held carries none (our
		// hold whose answer was lost).
		hold := func() error {
			if f.row.ETag == wrote && c.opts.Clock.Now().Before(readItem(f.row).CancellingUntil.Add(-CancelHold/2)) {
				return nil
			}
			if f.row.ETag != wrote && c.opts.Clock.Now().Before(readItem(f.row).CancellingUntil) {
				// Held already, and not as this cancel last wrote it: by
				// another cancel (one that gave up after telling, or one
				// under way), or by this one with its answer lost. Either
				// may have told others, so this cancel never undoes it.
				told = true
			}
			row, err := c.holdForCancel(ctx, f.row)
			if err != nil {
				return err
			}
			if row.ETag != f.row.ETag {
				if m := sentMarks(f.row); f.row.ETag != wrote && (len(m) > 0 || f.row.Props.Str(PropCancelling) == "") {
					taken = m
				}
				wrote = row.ETag
			}
			f.row = row
			return nil
		}
		if steps.Check != nil {
			if err := steps.Check(readItem(f.row)); err != nil {
				return stop(err)
			}
		}
		if err := c.refuseSentChange(ctx, id, f.row, "cancel", "cancelled", false); err != nil {
			return stop(err)
		}
		if steps.First != nil {
			err := hold()
			if err == nil {
				err = steps.First(ctx, readItem(f.row))
				// (An error of First that says it told nobody leaves the
				// hold to be undone.)
				told = told || wrote != "" && f.row.ETag == wrote && !errors.Is(err, ErrNoneTold)
				if err != nil {
					return stop(err)
				}
				err = hold() // still held for the delete
			}
			switch {
			case conflict(err), storage.IsTransient(err):
				lastErr = err
				continue
			case err != nil:
				return stop(fmt.Errorf("cancel %s: %w", id, err))
			}
		}
		if mutate.On(mutate.CancelNoop) {
			return readItem(f.row), false, nil
		}
		ops := []table.Op{{Kind: table.Delete, PartitionKey: f.row.PartitionKey, RowKey: f.row.RowKey, IfMatch: f.row.ETag}}
		if f.index != nil {
			ops = append(ops, table.Op{Kind: table.Delete, PartitionKey: f.index.PartitionKey, RowKey: f.index.RowKey, IfMatch: f.index.ETag})
		}
		_, err = c.t.Submit(ctx, ops)
		switch {
		case err == nil:
			it := readItem(f.row)
			if it.PayloadBlob != "" && !blobMayBeNamed(it, c.opts.Clock.Now()) {
				c.deleteBlob(ctx, it.PayloadBlob)
			}
			return it, false, nil
		case errors.Is(err, storage.ErrNotFound), storage.IsTransient(err):
			tried = &f.row
		case conflict(err):
			tried = nil
		default:
			return stop(fmt.Errorf("cancel %s: %w", id, err))
		}
		lastErr = err
	}
}

// Reschedule moves the pending task with this id to a new due time: the new
// row is inserted, the old one deleted and the index updated in one
// transaction. For a recurring series this moves its next occurrence (and
// drops the occurrences already sent early). Messages sent early for the
// old due time become no-ops for workers that check them
// (Options.ChangesAfterSend); without them Reschedule refuses with
// ErrAlreadySent.
func (c *Client) Reschedule(ctx context.Context, id string, due time.Time) (Item, error) {
	return c.RescheduleWith(ctx, id, due, RescheduleOptions{})
}

// RescheduleOptions modify RescheduleWith.
type RescheduleOptions struct {
	// Sending: see AddOptions.Sending (for a one-off task rescheduled to
	// now whose message the caller sends itself; a series ignores it).
	Sending time.Time
}

// RescheduleWith is Reschedule with options. A disabled series
// rescheduled is enabled again (its next occurrence is due).
func (c *Client) RescheduleWith(ctx context.Context, id string, due time.Time, o RescheduleOptions) (Item, error) {
	if due.IsZero() {
		return Item{}, fmt.Errorf("%w: reschedule %s: no due time given", ErrInvalid, id)
	}
	if err := checkDue(due); err != nil {
		return Item{}, fmt.Errorf("%w: reschedule %s: %w", ErrInvalid, id, err)
	}
	return c.moveRow(ctx, id, "reschedule", "rescheduled", func(row table.Entity) (time.Time, table.Props, error) {
		if until := readItem(row).CancellingUntil; c.opts.Clock.Now().Before(until) {
			// A cancel holds the row while it tells the task's batch and
			// dependents that it was cancelled (or gave up after): moved
			// to now, or sent by a run-now, the task would run after they
			// heard it was cancelled.
			return time.Time{}, nil, fmt.Errorf("%w: reschedule %s: a cancel of the task is under way, or failed after telling its batch or dependents (its row is held until %s); cancel it again, or schedule it anew once the cancel is done", ErrBeingCancelled, id, until.Format(time.RFC3339))
		}
		props := table.Props(row.Props).Clone()
		if props.Str(PropWaiting) != "" {
			// A task waiting for others keeps waiting: the time it asks
			// for changes.
			props[PropWaiting] = FromTicks(Ticks(due)).Format(time.RFC3339Nano)
			return MaxTime, props, nil
		}
		props.Delete(PropDisabled)
		props.Delete(PropDisabledDue)
		props.Delete(PropSendingUntil)
		if rec, _, _ := props.StrictString(PropRecurrence); !o.Sending.IsZero() && rec == "" {
			props[PropSendingUntil] = o.Sending.UTC().Format(time.RFC3339Nano)
		}
		return due, props, nil
	})
}

// moveRow rewrites the pending row of id under a new RowKey in one
// transaction with its index row: change returns the new due time and
// properties from the row as read (the early-send bookkeeping of the old
// row is dropped afterwards: what was sent for it no longer applies). A
// row that would not move is returned as it is. verb and done name the
// change in errors ("reschedule", "rescheduled").
func (c *Client) moveRow(ctx context.Context, id, verb, done string, change func(row table.Entity) (time.Time, table.Props, error)) (_ Item, err error) {
	var lastErr error
	var wd withdrawals
	defer c.undoIfFailed(ctx, id, &wd, &err)
	var copied payloadCopy // the moved row's own copy of the payload blob
	defer func() {
		if err != nil && copied.ref != "" && !copied.written {
			c.deleteBlob(ctx, copied.ref) // named by no write
		}
	}()
	// tried is the row a write of this call rewrote, when that write failed
	// as a conflict: its answer may have been lost after it committed (the
	// SDK's retry met its own write), and a later try that finds the row
	// already as this call writes it takes back tried's confirmation then.
	var tried *table.Entity
	for range retries {
		f, _, err := c.locate(ctx, id)
		if err != nil {
			return Item{}, err
		}
		_, suffix, err := ParseRowKey(f.row.RowKey)
		if err != nil {
			return Item{}, fmt.Errorf("%w: %s %s: the row is malformed: %w", ErrInvalid, verb, id, err)
		}
		due, props, err := change(f.row)
		if err != nil {
			return Item{}, err
		}
		if props == nil {
			return readItem(f.row), nil // nothing to change
		}
		newRK, err := RowKey(due, suffix)
		if err != nil {
			return Item{}, fmt.Errorf("%w: %s %s: %w", ErrInvalid, verb, id, err)
		}
		if newRK == f.row.RowKey {
			if maps.Equal(props, f.row.Props) {
				if tried != nil {
					c.unconfirm(ctx, id, *tried, false) // this call's write, its answer lost
				}
				return readItem(f.row), nil
			}
			// Only properties change (a waiting task notes a parent).
			written, err := c.rewrite(ctx, f.row, props)
			if err == nil {
				return readItem(written), nil
			}
			if !conflict(err) {
				return Item{}, fmt.Errorf("%s %s: %w", verb, id, err)
			}
			lastErr = err
			continue
		}
		if err := c.refuseSentChange(ctx, id, f.row, verb, done, true); err != nil {
			return Item{}, err
		}
		// The moved row is a new row: what was sent early for the old one
		// no longer applies.
		for _, k := range []string{PropSent, PropSentUntil, PropConfirmed} {
			props.Delete(k)
		}
		if err := c.copyPayload(ctx, readItem(f.row), props, &copied); err != nil {
			return Item{}, fmt.Errorf("%s %s: %w", verb, id, err)
		}
		moved := table.Entity{PartitionKey: f.row.PartitionKey, RowKey: newRK, Props: props}
		ops := []table.Op{
			{Kind: table.Insert, PartitionKey: moved.PartitionKey, RowKey: newRK, Props: props},
			{Kind: table.Delete, PartitionKey: f.row.PartitionKey, RowKey: f.row.RowKey, IfMatch: f.row.ETag},
		}
		if mutate.On(mutate.KeepOldRow) {
			ops = ops[:1]
		}
		if f.index != nil {
			ops = append(ops, table.Op{Kind: table.Merge, PartitionKey: f.index.PartitionKey, RowKey: f.index.RowKey, Props: map[string]any{PropItem: newRK}, IfMatch: f.index.ETag})
		}
		wd = wd.add(c.withdraw(ctx, id, f.row))
		copied.written = copied.written || copied.ref != "" && props.Str(PropPayloadBlob) == copied.ref
		etags, err := c.t.Submit(ctx, ops)
		if err == nil {
			c.unconfirm(ctx, id, f.row, false) // (a new RowKey: a new due time)
			if due.Before(MaxTime) {
				c.wakeOwner(ctx, moved.PartitionKey, due)
			}
			moved.ETag = etagAt(etags, 0)
			return readItem(moved), nil
		}
		if !conflict(err) {
			return Item{}, fmt.Errorf("%s %s: %w", verb, id, err)
		}
		tried = &f.row
		lastErr = err
	}
	return Item{}, fmt.Errorf("%s %s: still conflicting after %d attempts: %w", verb, id, retries, lastErr)
}

// payloadCopy is a copy moveRow made of a payload blob (from) for the
// moved row (ref). Once a write naming it was tried (written), it is
// never deleted: that write may have committed, its answer lost, and the
// moved row's message gone out naming it (a review: a retry that then
// found the row gone deleted the copy the sent message named).
type payloadCopy struct {
	from, ref string
	written   bool
}

// copyPayload gives props, the row a one-off task old is moved to, a copy
// of old's payload blob of its own when a traffic-cop pass may have sent
// old's message (mayBeSent; not marked, or marked as sent early), which
// names the old blob: both versions may then run once (README), and the
// first to succeed deletes its blob, which the other would fail without
// (a review of issue 38's row 199). A series' blob is never deleted by a
// run, and stays shared. A blob already gone stays named: the move goes
// on as before. A copy made by an earlier try of the same blob is reused.
func (c *Client) copyPayload(ctx context.Context, old Item, props table.Props, copied *payloadCopy) error {
	blob, _, _ := props.StrictString(PropPayloadBlob)
	if blob == "" || blob != old.PayloadBlob || old.Recurrence != "" || c.opts.PayloadStore == nil || !mayBeSent(old, c.opts.Clock.Now()) {
		return nil
	}
	if copied.from != blob || copied.ref == "" {
		data, err := c.opts.PayloadStore.Get(ctx, blob)
		if errors.Is(err, payload.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("copy the payload of a task whose message may be on its way: %w", err)
		}
		if copied.ref != "" && !copied.written && copied.ref != blob {
			c.deleteBlob(ctx, copied.ref) // a copy of another blob, named by nothing
		}
		ref, err := c.opts.PayloadStore.Put(ctx, payload.NewName(old.ID), data)
		if err != nil {
			return fmt.Errorf("copy the payload of a task whose message may be on its way: %w", err)
		}
		*copied = payloadCopy{from: blob, ref: ref}
	}
	props[PropPayloadBlob] = copied.ref
	return nil
}

// unconfirm takes back the confirmation of the run of old, a row that was
// just rewritten, when its message was sent (PropSent on a one-off task's
// row, by a client for now or by the mover early): whether or not the row
// says the run was confirmed (PropConfirmed), the run may carry the token
// — a confirmation whose answer was lost, or whose mark on the row the
// change came before. With Options.UnconfirmDue the run of old's due time
// is withdrawn, so that a confirmation still to come is refused too: the
// mover's, of a row it read before the change, came twenty seconds late
// and took over the record of the task's next run, which had succeeded,
// as a queued run that never ran (issue 38, seed 30276). Otherwise
// Unconfirm clears the token only if the run carries it. Both come after
// the write, not before it as withdraw's: the mover retires a row sent
// early around its due time, and a withdrawal before a change that then
// failed, the row moved, left its message stale until the undo, which a
// slow store made come after the message did (seed 30689: the task never
// ran). A change that keeps the due time (a replace of the same RowKey)
// takes back only the old token (Unconfirm): the new row's own
// confirmation, of the same due time, may already be on the record, and
// withdrawing that due time would erase it, or refuse it. A failure is
// logged: the change stands, and the old message may then run once.
func (c *Client) unconfirm(ctx context.Context, id string, old table.Entity, sameDue bool) {
	tok := oneOffSent(old)
	if tok == "" {
		return
	}
	var err error
	switch {
	case c.opts.UnconfirmDue != nil && !sameDue:
		_, err = c.opts.UnconfirmDue(ctx, readItem(old))
	case c.opts.Unconfirm != nil:
		err = c.opts.Unconfirm(ctx, id, tok)
	default:
		return
	}
	if err != nil {
		c.opts.Logger.Warn("cannot take back the confirmation of a task sent for now; its old message may still run", "task_id", id, "err", err)
	}
}

// withdraw withdraws the run of old, a row about to be rewritten that its
// client is still sending (no token on it yet), before the write
// (Options.UnconfirmDue): its sender may confirm the run before the change
// or after it, and the mark on the record refuses the confirmation either
// way. Done first, it holds even when the write's answer is lost. Should
// the change fail, the message is checked against the row and runs — or,
// when the sender marked the row and the mover retired it on the strength
// of the confirmation the withdrawal took, undoWithdrawals puts it back.
// A failure is logged, as unconfirm's.
func (c *Client) withdraw(ctx context.Context, id string, old table.Entity) withdrawal {
	if c.opts.UnconfirmDue == nil || !beingSent(old) {
		return withdrawal{}
	}
	it := readItem(old)
	tok, err := c.opts.UnconfirmDue(ctx, it)
	if err != nil {
		c.opts.Logger.Warn("cannot withdraw the run of a task being sent for now; its old message may still run", "task_id", id, "err", err)
	}
	return withdrawal{old: it, token: tok}
}

// withdrawal is what withdraw took back: the confirmation under token of
// the run of old ("" none).
type withdrawal struct {
	old   Item
	token string
}

// withdrawals are those a change made, one per try that took a
// confirmation back (each try reads the row again: another change may have
// rewritten it, and its sender confirmed the new due time, meanwhile).
type withdrawals []withdrawal

func (ws withdrawals) add(w withdrawal) withdrawals {
	if w.token == "" {
		return ws
	}
	return append(ws, w)
}

// undoIfFailed, deferred by a change (moveRow, add), undoes its
// withdrawals when it returns *err.
func (c *Client) undoIfFailed(ctx context.Context, id string, wd *withdrawals, err *error) {
	if *err != nil {
		c.undoWithdrawals(ctx, id, *wd)
	}
}

// undoWithdrawals puts back the confirmations a failed change's
// withdrawals took, when they are all the task has left: between the
// change's read and its withdrawal the sender marked the row sent and
// confirmed, and the mover retired it without sending — the old message
// is then the task's only one, and without its confirmation it would be
// acknowledged as stale (issue 38, seed 30004: a run-now's slow withdrawal
// beside a ScheduleMany's send; the task never ran). The row is read
// first: with no row of the id, each is put back; with one, only a
// withdrawal of that very row, marked sent with its token since or still
// exactly as the withdrawal read it, is (a row written since — this
// change's own, whose answer was lost, or another's — stands for the
// task, and the old message must stay stale). A lookup that gave up
// scanning is no answer: nothing is put back. The run takes a
// confirmation back only if its record is exactly as the withdrawal left
// it. A failure is logged.
func (c *Client) undoWithdrawals(ctx context.Context, id string, ws withdrawals) {
	if len(ws) == 0 || c.opts.ConfirmAgain == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	f, _, err := c.locate(ctx, id)
	if err != nil && (!errors.Is(err, ErrNotFound) || errors.Is(err, ErrScanGaveUp)) {
		c.opts.Logger.Warn("cannot read the row of a task being sent for now whose change failed; its message may be taken for stale", "task_id", id, "err", err)
		return
	}
	for _, w := range slices.Backward(ws) {
		// The old row itself, marked with the token since, or exactly as
		// the withdrawal read it (its sender may mark it yet, and the
		// change never happened): the withdrawal is rolled back.
		mine := err == nil && f.row.RowKey == w.old.RowKey && (oneOffSent(f.row) == w.token || f.row.ETag == w.old.ETag)
		if err == nil && !mine {
			continue
		}
		if err := c.opts.ConfirmAgain(ctx, w.old, w.token); err != nil {
			c.opts.Logger.Warn("cannot put back the confirmation of a task being sent for now whose change failed; its message may be taken for stale", "task_id", id, "err", err)
		}
	}
}

// messageMayBeOut reports whether a message of it, naming its payload
// blob, may be in the queue: its client sending it for now, or the mover
// having sent it (or a series' occurrences) early. A cancel then keeps
// the blob: the run may be claimed before the cancel reaches its record,
// and would fail for want of its payload (issue 38, sim seed 116107). A
// blob kept so is left over (storage only), as after a lost answer.
func messageMayBeOut(it Item) bool {
	return it.Sent || !it.SendingUntil.IsZero() || !it.SentUntil.IsZero()
}

// blobNamedOut reports whether the payload blob of row may be named by a
// message in the queue or by a run under way at now, and is to be kept
// when the row is cancelled or replaced: mayBeSent, or any series. Every
// occurrence's message names the series' blob, one under way carries on
// to its end, retries included, after its series is cancelled or
// replaced, and the row does not reliably say whether one was sent: the
// mover writes its Seq after the send, and a reschedule or disable in
// between leaves it unwritten (row 199, and a review of its first fix).
// A series' blob is left over (storage only).
func blobNamedOut(row table.Entity, now time.Time) bool {
	return blobMayBeNamed(readItem(row), now)
}

// blobMayBeNamed is blobNamedOut for an item.
func blobMayBeNamed(it Item, now time.Time) bool {
	return it.Recurrence != "" || mayBeSent(it, now)
}

// mayBeSent reports whether a message of it, naming its payload blob,
// may be in the queue at now: messageMayBeOut, or a row due by then (give
// or take ClockSlack), which a traffic-cop pass sends before it marks or
// retires it — a series' first occurrence too, sent before its row says
// so. A task parked waiting for its parents is not sent by a pass.
func mayBeSent(it Item, now time.Time) bool {
	return messageMayBeOut(it) || !it.Waiting && it.Due.Before(MaxTime) && !it.Due.After(now.Add(ClockSlack))
}

// beingSent reports whether row is a one-off task's written while its
// client sends its message (PropSendingUntil), not yet marked sent.
func beingSent(row table.Entity) bool {
	return row.Props.Str(PropRecurrence) == "" && row.Props.Str(PropSent) == "" && row.Props.Str(PropSendingUntil) != ""
}

// oneOffSent returns the token of the message sent for row when row is a
// one-off task's whose message was sent ("" otherwise).
func oneOffSent(row table.Entity) string {
	if row.Props.Str(PropRecurrence) != "" {
		return ""
	}
	return row.Props.Str(PropSent)
}

// refuseSentChange refuses to change (verb; done: the participle) a row
// whose message was already sent when the change cannot be honoured:
// refuseSent, then refuseStarted (unmarked: see there).
func (c *Client) refuseSentChange(ctx context.Context, id string, row table.Entity, verb, done string, unmarked bool) error {
	if err := c.refuseSent(row, done); err != nil {
		return err
	}
	return c.refuseStarted(ctx, id, row, verb, unmarked)
}

// refuseStarted returns an error wrapping ErrNotFound when row is a
// one-off task's whose sent message has already started its run
// (Options.SentStarted), or whose message its client is still sending
// and whose run of that due time has started: moving the row would run
// the task again. With unmarked, a one-off row due at some time that
// says nothing of a send is asked about too: a traffic-cop pass sends a
// due row's message before it retires the row, and an early one's before
// it marks the row sent, so a pass that stopped or was slowed between the
// two leaves a row that looks pending behind a message that may have run
// (issue 38, seed 50023: a mover frozen after an early send; the task
// died, and a reschedule of the unmarked row ran it all over again).
func (c *Client) refuseStarted(ctx context.Context, id string, row table.Entity, verb string, unmarked bool) error {
	tok, it := oneOffSent(row), readItem(row)
	asked := tok != "" || beingSent(row) || unmarked && MayHaveRun(it, c.opts.Clock.Now())
	if !asked || c.opts.SentStarted == nil {
		return nil
	}
	started, err := c.opts.SentStarted(ctx, id, tok, it.Due)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: cannot tell whether its message already ran: %w", verb, id, err)
	case started:
		return fmt.Errorf("%w: %s %s: the task is no longer pending: its message has already started it", ErrNotFound, verb, id)
	}
	return nil
}

// MayHaveRun reports whether a run of it, a pending task whose row says
// nothing of a send, may already have started: a traffic-cop pass sends
// before it marks or retires a row, so a pass stopped between the two
// leaves the row behind a message that may run. A message is not
// delivered before its due time, so only a one-off row due by now (give
// or take ClockSlack) can be; a series' row and a task parked waiting for
// its parents never are.
func MayHaveRun(it Item, now time.Time) bool {
	return it.Recurrence == "" && !it.Waiting && it.Due.Before(MaxTime) && !it.Due.After(now.Add(ClockSlack))
}

// ClockSlack is how far ahead of a process's clock another's is taken to
// be at most, where one decides from the other's clock what cannot have
// happened yet (MayHaveRun). The README asks for clocks within a second;
// this allows sixty.
const ClockSlack = time.Minute

// refuseSent returns ErrAlreadySent when row's message was already sent
// early and the workers do not check early-sent messages
// (Options.ChangesAfterSend is false): the change could not be honoured.
func (c *Client) refuseSent(row table.Entity, verb string) error {
	if c.opts.ChangesAfterSend {
		return nil
	}
	sent, _, _ := row.Props.StrictString(PropSent)
	if sent == "" {
		return nil
	}
	it := readItem(row)
	return fmt.Errorf("%w: task %s (due %s) cannot be %s: its message is already in the queue, invisible until due, and without run records the workers cannot tell that it changed", ErrAlreadySent, it.ID, it.Due.Format(time.RFC3339), verb)
}

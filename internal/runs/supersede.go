package runs

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Early-sent runs. The mover sends a task due within its enqueue-early
// window ahead of time, with a token its row records, and leaves the row in
// the schedule until the task is nearly due; a cancel, reschedule, replace
// or delete meanwhile changes the row. When the mover moves the row it first
// confirms the run here: MarkQueued with Meta.Token records the token on
// the run, and in the key of its queued state row. A claim of the message's
// first attempt (Meta.Token set) takes exactly that row, in one write as for
// any marked run, and so succeeds only if the record carries the token;
// otherwise it is refused
// with ErrUnconfirmed and the worker looks at the row itself (the leader may
// have died before moving it): unchanged, it claims again without the
// token; changed or gone, the message is stale and is acknowledged without
// running.

// ErrUnconfirmed: Claim of an early-sent message whose token the record
// does not carry (leasecrontype.ErrRunUnconfirmed).
var ErrUnconfirmed = leasecrontype.ErrRunUnconfirmed

// unconfirmed reports whether a claim described by m is of an early-sent
// message whose token the record does not confirm: no record for this run
// (or only a finished earlier one), or one still scheduled or queued
// without the token, or another scheduling's run under way that this due
// time was not moved beside. A run of its due time already running,
// finished or cancelled is left to the usual rules (a retry, a duplicate,
// a cancel).
func unconfirmed(cur *Run, m Meta) bool {
	if m.Token == "" {
		return false
	}
	if cur != nil && cur.confirmedBehind(m.Due) {
		return false // confirmed when the record was taken over from it
	}
	if cur == nil || newer(cur, m) {
		return true
	}
	if notStarted(cur) {
		return cur.Token != m.Token
	}
	// A run that has started (running, between attempts, handed back at
	// shutdown) had its own message checked when an attempt claimed it;
	// not a message of another due time, which its record never confirmed
	// (a confirmation beside another scheduling's run under way is
	// refused: decideConfirmed). Taken for started, the old early-sent
	// message of a rescheduled task took the new version's handed-back
	// run over and ran beside it (issue 38, row 164). A due time moved
	// beside the run (Behind) is known to the record, and a scheduling
	// taken over is noted there: its message waits its turn as usual. One
	// that ended is left to the usual rules too: its end refuses the
	// message, which may be the one that tells what waits for its own run.
	return otherDue(cur, m) && !cur.State.Finished() && !cur.Behind.has(m.Due)
}

// notStarted reports whether cur's run has not started as far as its
// message goes: no attempt has claimed it (scheduled, queued, or noted as
// waiting before its first attempt). A run queued again after an attempt
// was handed back at shutdown has started: its message was checked (by
// its token, or against its row) when that attempt claimed it, and a
// claim of it again must not be sent to the row, which the mover may
// have removed since (issue 38, seed 1032: the task was acknowledged as
// stale and never ran).
func notStarted(cur *Run) bool {
	switch cur.State {
	case "", Scheduled:
		return true
	case Queued:
		return cur.Attempts == 0
	}
	return cur.WaitingUnclaimed()
}

// WaitingUnclaimed reports whether r is a run noted as waiting (put back
// for its rate limit before any attempt: Snooze on a run nobody claimed)
// and never claimed: it is still queued as far as its message goes — an
// early-sent message's claim must find its token on it, and the mover's
// confirmation takes it over (issue 38, seed 1011: the note let a stale
// message of a disabled series run) — and as far as its unique key goes
// (seed 14473), though it shows snoozed.
func (r *Run) WaitingUnclaimed() bool {
	return r.State == Snoozed && r.Attempts == 0
}

// WaitingForRate reports whether r shows snoozed because it was put back
// for its rate limit (NoteWaiting), not because its handler snoozed it:
// never claimed, or due again after an attempt (a retry, a delivery
// handed back at a worker's shutdown) and put back for its rate before
// it was claimed again. As far as its unique key goes it is queued (issue
// 38, simulator row 99); a retry's next claim makes the next attempt
// (Run.WaitRetry, read only while this holds).
func (r *Run) WaitingForRate() bool {
	return r.WaitingUnclaimed() || r.State == Snoozed && !r.WaitNoted.IsZero() && r.WaitNoted.Equal(r.SnoozedUntil)
}

// Unconfirm takes back the confirmation of an early-sent run (MarkQueued
// with Meta.Token) whose row changed before the mover could move it: the
// token is cleared if the record still carries it, so a claim of the stale
// message is refused and checked against the row.
func (s *Store) Unconfirm(ctx context.Context, id, token string) error {
	if err := validateID(id); err != nil {
		return err
	}
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil || token == "" || cur.Token != token {
			return Run{}, false, nil
		}
		next := *cur
		next.Token = ""
		return next, true, nil
	})
}

// UnconfirmDue withdraws the run of m's due time (m describes the task as
// it was): any confirmation of it that has not started is taken back, the
// token cleared whatever it is, and one that comes later is refused
// (Run.Withdrawn, kept by the record whichever scheduling it describes
// next). For a row written while its client was sending its message
// (schedule.AddOptions.Sending) and rescheduled or replaced before that
// client marked it: the row names no token yet, and the sender may confirm
// the run before the change or after it — even after the changed task has
// run (issue 38, seed 1142: the old message ran beside the rescheduled
// task). The old message is then checked against the row, and found
// stale. Without a record, one is written queued for that due time (as a
// taken-back confirmation leaves it), carrying the mark. Only a record of
// exactly that due time is a confirmation of it (not one of an earlier
// release, which knows no due time). It returns the token of the
// confirmation it took back ("" when there was none), for ConfirmAgain.
func (s *Store) UnconfirmDue(ctx context.Context, id string, m Meta) (string, error) {
	if err := validateID(id); err != nil {
		return "", err
	}
	if m.Due.IsZero() {
		return "", fmt.Errorf("%w: withdraw %s: no due time", ErrInvalid, id)
	}
	due := stored(m.Due)
	// took is kept across modify's tries: a try that finds the token gone
	// may follow one whose write committed although its answer was lost.
	// (It may also be from a try that did not commit, the token cleared
	// since by another: the caller's read of the row before it puts the
	// token back, and ConfirmAgain's conditions, cover that.)
	var took string
	err := s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil {
			next := newRun(id, Queued)
			fillMeta(&next, Meta{Type: m.Type, Due: due, Batch: m.Batch})
			next.Withdrawn = dues{}.with(due)
			return next, true, nil
		}
		// (A requeue's token is its message's, not a confirmation of a
		// send of the row: it stays.)
		confirmed := cur.Token != "" && !isRequeueToken(cur.Token) && notStarted(cur) && cur.Due.Equal(due)
		if cur.Withdrawn.has(due) && !confirmed {
			return Run{}, false, nil // withdrawn already
		}
		next := *cur
		if confirmed {
			if len(cur.Withdrawn) < maxDues {
				// (A full list drops its oldest due time, which
				// ConfirmAgain could not bring back: nothing to undo.)
				took = cur.Token
			}
			next.Token = ""
		}
		next.Withdrawn = next.Withdrawn.with(due)
		return next, true, nil
	})
	return took, err
}

// ConfirmAgain puts back a confirmation UnconfirmDue took (token, of m's
// due time) when the change it was taken for did not happen: the row was
// marked sent and confirmed between the change's read and its withdrawal,
// and the mover, finding it so, retired it without sending; then the
// change found no row. The message under token is all the task has left,
// and without its confirmation it would be acknowledged as stale (issue
// 38, seed 30004: a run-now's slow withdrawal met a ScheduleMany's
// confirmed send, and the task never ran). Only the record exactly as the
// withdrawal left it takes it back: unstarted, of that due time, with no
// token and the due time withdrawn.
func (s *Store) ConfirmAgain(ctx context.Context, id string, m Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	if m.Due.IsZero() || m.Token == "" {
		return fmt.Errorf("%w: confirm %s again: no due time or token", ErrInvalid, id)
	}
	due := stored(m.Due)
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil || cur.Token != "" || !notStarted(cur) || !cur.Due.Equal(due) || !cur.Withdrawn.has(due) {
			return Run{}, false, nil
		}
		next := *cur
		next.Token = m.Token
		next.Withdrawn = next.Withdrawn.without(due)
		return next, true, nil
	})
}

// SentStarted reports whether the message sent for a one-off task due at
// due, with token, has already started its run: the record is past
// queued (cancelled counts once an attempt was made) and carries token,
// or no token (a worker claimed the message after checking its row,
// before the confirmation) and that due time; or a requeue brought the
// run of that due time back (its message ran and died first); or another
// scheduling took the record over from that due time's run, which the
// record keeps confirmed behind it (its message runs once that run has
// ended). One point
// read. A task whose message started is no longer pending, whatever its
// row says until the mover's next pass (schedule.Options.SentStarted).
func (s *Store) SentStarted(ctx context.Context, id, token string, due time.Time) (bool, error) {
	if err := validateID(id); err != nil {
		return false, err
	}
	cur, ok, err := s.read(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	if (isRequeueToken(cur.Token) || len(cur.Requeued) > 0) && !cur.Due.IsZero() && cur.Due.Equal(stored(due)) {
		// A requeue brought the run of this due time back: a message of
		// it ran and died first, and the row (waiting for the mover's
		// retire) is that message's; the requeue's token on the record
		// (or, requeued by an earlier release, its reset attempts) does
		// not make it unstarted (issue 38, seed 17547: a reschedule moved
		// the row, and the task ran once more than its requeues).
		return true, nil
	}
	if cur.confirmedBehind(due) {
		// Another scheduling took the record over from this due time's run
		// (started and handed back, or confirmed): the record keeps its
		// message confirmed (unconfirmed), so it runs once that run has
		// ended, whatever its row says. Taken for unstarted, a reschedule
		// of its lingering row withdrew the due time and the old version
		// ran beside the new (a review of issue 38's row 164 fix).
		return true, nil
	}
	if notStarted(&cur) || cur.State == Cancelled && cur.Attempts == 0 {
		// (A run cancelled before any attempt has not started: a cancel
		// tried again still removes its row. One cancelled while an
		// attempt ran has: seed 14673, run-now ran it again.)
		return false, nil
	}
	if token == "" {
		// A row still being sent names no token yet: any run of its due
		// time that has started is its message's.
		return !cur.Due.IsZero() && cur.Due.Equal(stored(due)), nil
	}
	return cur.Token == token || cur.Token == "" && cur.Due.Equal(stored(due)), nil
}

// Confirm records early-sent runs before the mover moves their rows
// (MarkQueued with each Meta.Token set) and reports, for each, whether the
// row may be moved: the run now carries its token, or it has already moved
// past queued (a worker ran it after checking the row, or it was
// cancelled), or a requeue brought it back after this token's message
// ran (the run is the requeue's message's). A false answer keeps the row
// for the next pass.
func (s *Store) Confirm(ctx context.Context, marks []Mark) []bool {
	return s.markedBy(ctx, marks, decideConfirmed)
}

// ConfirmSent is Confirm for a client that sent the message of a row it
// wrote (schedule.AddOptions.Sending): it never replaces another token's
// confirmation of the same due time on a run that has not started. Two
// senders of one row (a RunNow beside the scheduling that wrote it) each
// confirm with their own token, and only one marks the row: had the
// later confirmation replaced the earlier, the row could say confirmed
// with a token the run no longer carries, and once the loser took its
// own back the run carried none; the mover retired the row without
// sending, and both messages were acknowledged as stale (issue 38, seed
// 6183: the task never ran). The first confirmation stands; the second
// sender's mark then says unconfirmed, or is refused. (The mover's
// confirmation, made as it moves the row it marked, still replaces any.)
func (s *Store) ConfirmSent(ctx context.Context, marks []Mark) []bool {
	return s.markedBy(ctx, marks, decideSentConfirmed)
}

// decideSentConfirmed is decideConfirmed that leaves another live token's
// confirmation of the same due time alone, and a record whose cancel
// noted the due time (its row removed while it was sent) unconfirmed
// (ConfirmSent).
func decideSentConfirmed(cur *Run, id string, m Meta) (next Run, write, marked bool) {
	if cur != nil && cur.State.Finished() && otherDue(cur, m) && cur.CancelledDue.has(m.Due) {
		// Its row was cancelled while it was sent (CancelPending marked the
		// run under way then, and noted this due time): its message is
		// checked against the row, which is gone.
		return *cur, false, false
	}
	if cur != nil && cur.State == Queued && cur.Due.Equal(stored(m.Due)) && notStarted(cur) &&
		cur.Token != "" && m.Token != "" && cur.Token != m.Token && !isRequeueToken(cur.Token) && !withdrawn(cur, m) {
		return *cur, false, false
	}
	return decideConfirmed(cur, id, m)
}

// decideConfirmed is decideQueued for Confirm: a run that has moved past
// queued (a worker ran it after checking the row, or it was cancelled)
// needs no confirmation and counts as confirmed, decided on the one read.
func decideConfirmed(cur *Run, id string, m Meta) (next Run, write, marked bool) {
	if cur != nil && otherDue(cur, m) && (cur.SucceededDue.has(m.Due) || cur.DeadDue.has(m.Due)) {
		// Its run succeeded or died, and then another scheduling took the
		// record over (a second message of the run its row replaced ran):
		// it has moved past queued as surely as a record of its own would
		// say. Refused as withdrawn (the takeover withdrew its due time),
		// its row stayed pending for good, the mover asking again every
		// pass (issue 38, seed 30276). A new scheduling of that very due
		// time moved without a token is marked queued before it is sent,
		// which forgets the end once the record's run has ended (while
		// another scheduling's run is under way the mark too takes it
		// for the ended run: row 206); one sent early under a token is recorded
		// only by this confirmation, so a task scheduled again for the
		// exact instant of a run that ended before a takeover is taken for
		// that run here, and its message for stale (left as is: it needs
		// the same due time to the 100 ns tick).
		return *cur, false, true
	}
	next, write, marked = decideQueued(cur, id, m)
	if marked || cur == nil || newer(cur, m) {
		return next, write, marked
	}
	switch {
	case otherDue(cur, m):
		// The record is another scheduling's, still under way (the id
		// was scheduled again, or rescheduled, while an earlier run of
		// it was queued or running): this one is not confirmed, and its
		// row stays until that run has ended. Counted as confirmed, the
		// row would go and this run's message be taken for stale. Nor
		// is it noted behind that run: its row is still pending, and a
		// cancel or change of the row reaches it there.
		return *cur, false, false
	case cur.State == "" || cur.State == Scheduled || cur.State == Queued, cur.WaitingUnclaimed():
		// Not moved past queued (a run noted as waiting for its rate has
		// not started): a refused confirmation is not one.
		return next, write, false
	}
	return *cur, false, true
}

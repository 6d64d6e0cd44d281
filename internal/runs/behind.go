package runs

import (
	"slices"
	"strings"
	"time"
)

// An id has one run record, and may be scheduled again while a run of it
// is queued or running: the mover then moves the new scheduling to the
// queue beside the record of the earlier one, and its delivery waits for
// that run to end (attemptsUnderWay). A cancel of the id must reach the
// schedulings moved so as well as the one the record describes (issue 38,
// seed 2100: a second scheduling, queued behind the first run, ran after
// the cancel of the id had answered). The record therefore keeps the due
// times of the schedulings moved beside it and not started yet
// (Run.Behind), and a cancel turns them into cancelled due times
// (Run.CancelledDue), whose deliveries are refused as cancelled whichever
// scheduling the record describes next. Both are carried from a record to
// its successor, as the withdrawn due time is.

// maxDues bounds each list of due times a record keeps.
const maxDues = 4

// dues is a short list of due times, the latest noted first.
type dues []time.Time

// has reports whether d holds t (to the table's tick).
func (d dues) has(t time.Time) bool {
	return !t.IsZero() && slices.ContainsFunc(d, func(x time.Time) bool { return x.Equal(stored(t)) })
}

// with returns d with t first (kept once; the oldest dropped past maxDues).
func (d dues) with(t ...time.Time) dues {
	out := slices.Clone(d)
	for _, x := range t {
		if x.IsZero() || out.has(x) {
			continue
		}
		out = append(dues{stored(x)}, out...)
	}
	if len(out) > maxDues {
		out = out[:maxDues]
	}
	return out
}

// without returns d without t.
func (d dues) without(t time.Time) dues {
	if !d.has(t) {
		return d
	}
	return slices.DeleteFunc(slices.Clone(d), func(x time.Time) bool { return x.Equal(stored(t)) })
}

// String is the stored form: the times, RFC 3339 with nanoseconds,
// comma-separated.
func (d dues) String() string {
	s := make([]string, len(d))
	for i, t := range d {
		s[i] = t.UTC().Format(time.RFC3339Nano)
	}
	return strings.Join(s, ",")
}

// parseDues reads the stored form; a time that does not parse is left out.
func parseDues(s string) dues {
	var out dues
	for _, x := range splitList(s) {
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			out = append(out, stored(t))
		}
	}
	return out
}

// endedScheduling returns, when m is a delivery of a scheduling of this
// id that ended beside another scheduling's record, the refusal its claim
// gets, as that run's own record would have answered: ErrCancelled for
// one a cancel reached (Run.CancelledDue), ErrAlreadySucceeded or ErrDead
// for one that succeeded or died before another scheduling took the
// record over (Run.SucceededDue, Run.DeadDue; issue 38, seed 17525). An
// early-sent message (with a token, or checked against its row) is left
// to its row: a cancel removes the row of a scheduling it reaches, and a
// new scheduling of the very due time would otherwise be refused before
// its confirmation is recorded; once marked queued or moved beside the
// record, such a scheduling is no longer refused (forgetEnded). But once
// its row is found not to stand for it (Meta.RowGone: gone or changed), a
// due time that succeeded or died is taken for its own run's end: left to
// the row, it was taken for a stale message and acknowledged, and a batch
// its run's worker died before telling never heard of the end (issue 38,
// seed 90112). A new scheduling of that very due time sent early after
// the takeover, whose confirmation decideConfirmed counts without a
// write, is taken for it too, and its batch told that end (it was
// acknowledged as stale before: either way it does not run).
func endedScheduling(cur *Run, m Meta) error {
	early := m.Token != ""
	if cur != nil && m.RowChecked && m.RowCheckedOver != "" && cur.ETag != m.RowCheckedOver && otherDue(cur, m) && cur.CancelledDue.has(m.Due) {
		// The record changed since the claim before the row check, and
		// notes a cancel of this due time: one that came between the row
		// check and this claim, the row deleted just after it was read
		// (issue 38, row 257: the task ran after its cancel returned). A
		// record that noted the cancel already at that claim returned no
		// version: a new scheduling of a cancelled due time, which its
		// row decides.
		return ErrCancelled
	}
	if cur == nil || m.RowChecked || !otherDue(cur, m) || early && !m.RowGone {
		return nil
	}
	switch {
	case !early && cur.CancelledDue.has(m.Due):
		return ErrCancelled
	case cur.SucceededDue.has(m.Due):
		return ErrAlreadySucceeded
	case cur.DeadDue.has(m.Due):
		return ErrDead
	}
	return nil
}

// noteBehind records on r, whose run has not finished, that the
// scheduling due at due was moved beside it. It reports whether that
// changed r. A scheduling of a due time cancelled before is a new one: it
// is no longer refused.
func (r *Run) noteBehind(due time.Time) bool {
	if due.IsZero() || r.Due.IsZero() || r.State.Finished() || r.Behind.has(due) {
		return false
	}
	r.Behind = r.Behind.with(due)
	r.forgetEnded(due)
	return true
}

// forgetEnded drops due from the ended schedulings r keeps: a scheduling
// of that due time now is a new one.
func (r *Run) forgetEnded(due time.Time) {
	r.CancelledDue = r.CancelledDue.without(due)
	r.SucceededDue = r.SucceededDue.without(due)
	r.DeadDue = r.DeadDue.without(due)
}

// started drops due from what r keeps of other schedulings: r now
// describes the scheduling due then, which has been recorded queued or
// has started.
func (r *Run) started(due time.Time) {
	r.Behind = r.Behind.without(due)
	r.forgetEnded(due)
	r.ConfirmedBehind = r.ConfirmedBehind.without(due)
}

// confirmedBehind reports whether r was taken over from the scheduling
// due at due while that one's message stood confirmed (a confirmed run,
// or one that had started): its message runs once r's run has ended,
// whatever its row says.
func (r *Run) confirmedBehind(due time.Time) bool {
	return r.ConfirmedBehind.has(due) && r.Behind.has(due)
}

// cancelBehindDue turns the scheduling due at due, moved beside r, into a
// cancelled one. It reports whether r had it beside it.
func (r *Run) cancelBehindDue(due time.Time) bool {
	if !r.Behind.has(due) {
		return false
	}
	r.Behind, r.ConfirmedBehind = r.Behind.without(due), r.ConfirmedBehind.without(due)
	r.CancelledDue = r.CancelledDue.with(due)
	return true
}

// cancelBehind turns the schedulings moved beside r into cancelled ones
// (a cancel of the id reaches them). It reports whether there were any.
func (r *Run) cancelBehind() bool {
	if len(r.Behind) == 0 {
		return false
	}
	r.CancelledDue = r.CancelledDue.with(r.Behind...)
	r.Behind, r.ConfirmedBehind = nil, nil
	return true
}

// BehindWait bounds how long after its due time a scheduling of an id
// moved beside another's run (Behind) is still expected to start: past
// it, the entry is taken as one whose message is gone (purged, set aside
// unclaimed, or dropped as changed since it was sent early), so that
// what waits for the id is not held for good by an entry nothing will
// clear. A mover moves a scheduling at its due time or within its early
// window before, so the due time stands for when it was moved.
const BehindWait = time.Hour

// BehindPending reports whether a scheduling of r's id moved beside r's
// run is still expected to start as of now (Behind, within BehindWait of
// its due time).
func (r *Run) BehindPending(now time.Time) bool {
	return slices.ContainsFunc(r.Behind, func(due time.Time) bool { return now.Sub(due) <= BehindWait })
}

// EndOfID reports whether r's end is the end of its id as of now: r has
// finished and no other scheduling of the id waits beside it to start
// (BehindPending). A task waiting for the id (after or after-any) waits
// for that one instead — it was scheduled after the run began, as a
// replace or a schedule of the same id (issue 38, seed 3764: a child was
// released by the end of the run its parent's replacement waited behind).
func (r *Run) EndOfID(now time.Time) bool {
	return r.State.Finished() && !r.BehindPending(now)
}

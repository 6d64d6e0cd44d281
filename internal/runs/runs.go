package runs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// State is a run's visible state (leasecrontype.RunState).
type State = leasecrontype.RunState

// The states of a run, as in leasecrontype.
const (
	Scheduled = leasecrontype.RunScheduled
	Queued    = leasecrontype.RunQueued
	Running   = leasecrontype.RunRunning
	Succeeded = leasecrontype.RunSucceeded
	Failed    = leasecrontype.RunFailed
	Dead      = leasecrontype.RunDead
	Cancelled = leasecrontype.RunCancelled
	Snoozed   = leasecrontype.RunSnoozed
)

// States lists every state, in lifecycle order.
var States = leasecrontype.RunStates()

// ParseState parses a state name, naming the accepted values on error.
func ParseState(s string) (State, error) { return leasecrontype.ParseRunState(s) }

// Run is one run record: the public record (leasecrontype.Run: state,
// type, series, attempts, worker, times, last error, output tail, ...) and
// the row's ETag.
type Run struct {
	leasecrontype.Run
	// Token is the token of the early-sent message the mover confirmed for
	// this run when it moved the task's row (see supersede.go).
	Token string
	// Seq numbers an occurrence within its series (Meta.Seq; 0 when
	// unknown): its outcome goes to slot Seq mod SummarySlots of the
	// series' summary row.
	Seq int64
	// Requeued names the deaths of this run whose dead letters were
	// requeued, the latest first (at most MaxRequeued; see MarkRequeued).
	Requeued []string
	// Withdrawn lists the due times (the latest first, up to maxDues) of
	// schedulings of this id whose confirmation is refused from then on,
	// whichever scheduling the record describes: one whose message its
	// client sent for now and whose row was then rescheduled or replaced
	// (UnconfirmDue), one whose early-sent message was acknowledged as
	// superseded while the record described it (DropBehind), and the
	// finished one whose record a new scheduling took over (successor).
	// The property Withdrawn holds the latest, as earlier releases read
	// it; WithdrawnDues all of them.
	Withdrawn dues
	// Behind lists the due times of other schedulings of this id moved
	// to the queue while this record's run had not finished, and not
	// started since (behind.go): a cancel of the id reaches them too.
	Behind dues
	// CancelledDue lists the due times of schedulings of this id that a
	// cancel reached beside another scheduling's record: their
	// deliveries are refused as cancelled (behind.go).
	CancelledDue dues
	// SucceededDue and DeadDue list the due times of schedulings of this
	// id that succeeded or died and whose record another scheduling took
	// over (successor): a second message of such a run (sent twice: by
	// its client and by the mover) is refused as that run's duplicate,
	// whichever scheduling the record describes by then (behind.go).
	SucceededDue, DeadDue dues
	// ConfirmedBehind lists the due times of Behind whose confirmation
	// stood when this record was taken over from them (a confirmed run
	// waited for QueuedWait, its message held by a pause): their
	// early-sent messages claim without the row, which the mover has
	// removed (behind.go).
	ConfirmedBehind dues
	// WaitNoted is the SnoozedUntil a note that the run waits for its
	// rate limit wrote (NoteWaiting): while the run is snoozed until that
	// very time, it waits for its rate, not because its handler snoozed
	// it (see WaitingForRate). Any later transition changes the state or
	// the time, which leaves the mark stale without clearing it.
	WaitNoted time.Time
	// WaitRetry says that the wait WaitNoted marks was noted after a
	// failed attempt (or over such a wait): while the run waits for its
	// rate (WaitingForRate), its next claim makes the next attempt, as
	// the failed record would have counted it, not that attempt again.
	// Written by every note, so a mark left from an earlier wait never
	// applies to a later one.
	WaitRetry bool

	ETag string
	// legacy marks a record read from the previous layout.
	legacy bool
	// endAt is, on a claim kept in a Store's memory, when an end of its
	// attempt was first tried and failed without saying whether it was
	// written (end): a retry writes the same end time, by which it knows
	// its own end met again (a death written without a claim over the
	// lapsed claim carries the claim's worker, attempt and start too, but
	// not this time).
	endAt time.Time
	// pk is the partition of the run's rows: where they were read, or
	// where they are to be written (Layout). Every write of a run sets
	// it.
	pk string
	// at is, on a pointer row (a run row without a state: pointTo), the
	// partition the record of its id is written in; on the empty Run of a
	// lookup that found no record, where the pointers it read lead
	// (readIn).
	at string
}

// pointer reports whether r, read from a run row, was read from a pointer
// row (pointTo), not a record: every record has a state.
func (r Run) pointer() bool { return r.State == "" }

// newRun returns a record of id in state st.
func newRun(id string, st State) Run {
	return Run{Run: leasecrontype.Run{ID: id, State: st}}
}

// successor returns a fresh record of id in state st in place of cur (nil
// when there is none): only what outlives a scheduling (Withdrawn, the
// other schedulings behind it and those cancelled) is carried over.
func successor(cur *Run, id string, st State) Run {
	next := newRun(id, st)
	if cur != nil {
		next.Withdrawn = cur.Withdrawn
		if cur.State.Finished() && !cur.Due.IsZero() {
			// The finished scheduling's confirmation may still come (the
			// mover confirms an early-sent run as it retires its row, and
			// its message may have run already, claimed after its row was
			// checked): refused, it does not take this record over as a
			// queued run that never starts (issue 38, seed 4558).
			next.Withdrawn = next.Withdrawn.with(cur.Due)
		}
		next.Behind, next.CancelledDue, next.ConfirmedBehind = cur.Behind, cur.CancelledDue, cur.ConfirmedBehind
		next.SucceededDue, next.DeadDue = cur.SucceededDue, cur.DeadDue
		switch {
		case cur.Due.IsZero():
		case cur.State == Succeeded:
			// Its second message may still come (issue 38, seed 17525):
			// a duplicate, not a new run.
			next.SucceededDue = next.SucceededDue.with(cur.Due)
		case cur.State == Dead:
			next.DeadDue = next.DeadDue.with(cur.Due)
		}
		if cur.State == Cancelled && !cur.Due.IsZero() {
			// The cancelled scheduling's message may still be in the
			// queue (put back behind another run, or not yet delivered):
			// refused as cancelled whichever scheduling the record
			// describes next (issue 38, seed 4021: it ran after the id
			// was scheduled again and that task succeeded).
			next.CancelledDue = next.CancelledDue.with(cur.Due)
		}
	}
	return next
}

// withdrawn reports whether m is a confirmation (it carries a token) of a
// due time cur says was withdrawn.
func withdrawn(cur *Run, m Meta) bool {
	return cur != nil && m.Token != "" && cur.Withdrawn.has(m.Due)
}

// Meta is what a claim or a queued mark records about the task besides the
// claim itself (leasecrontype.RunMeta, the public shape queue.RunRecorder
// speaks).
type Meta = leasecrontype.RunMeta

// Limits on stored text.
const (
	// MaxOutputTail is the most output kept per run, in bytes (the end is kept).
	MaxOutputTail = leasecrontype.MaxOutputTail
	// MaxLastError is the most error text kept per run, in bytes.
	MaxLastError = 4 << 10
	// MaxListError is the most error text a listing row carries.
	MaxListError = 512
	// MaxIDLen is the longest run id with a record: every key holding it
	// must fit the service's 1 KiB RowKey limit.
	MaxIDLen = 960
)

// Sentinel errors.
var (
	// ErrNotFound: no record for this run id.
	ErrNotFound = notfound.New("run not found")
	// ErrExpired: the run's record has passed its retention; the cleaner
	// removes it (or has removed it). It matches ErrNotFound too.
	ErrExpired error = expired{}
	// ErrAlreadySucceeded: Claim found the run succeeded; the delivery is a
	// duplicate and must be acknowledged without running.
	ErrAlreadySucceeded = leasecrontype.ErrRunSucceeded
	// ErrCancelled: Claim found the run cancelled; acknowledge without running.
	ErrCancelled = leasecrontype.ErrRunCancelled
	// ErrDead: Claim found the run dead (not requeued); the delivery is a
	// second message of it: acknowledge without running.
	ErrDead = leasecrontype.ErrRunDead
	// ErrClaimedElsewhere: Claim found the run running on another worker
	// whose claim has not lapsed; put the message back for later.
	ErrClaimedElsewhere = leasecrontype.ErrRunClaimed
	// ErrAlreadyFinished: Cancel found the run already succeeded or dead
	// (a run already cancelled is no error: a cancel is idempotent).
	ErrAlreadyFinished = errors.New("run already finished")
	// ErrContention: a conditional write kept losing to concurrent writers.
	ErrContention = errors.New("run record changed concurrently too many times")
	// ErrInvalid: an argument was refused before anything was written.
	ErrInvalid = errors.New("invalid run argument")
)

// expired is ErrExpired: a "not found" with its own message.
type expired struct{}

func (expired) Error() string { return "run record expired" }
func (expired) Unwrap() error { return ErrNotFound }

// maxTries bounds read-modify-write loops on one run.
const maxTries = 5

// newer reports whether meta describes another scheduling of cur's id
// than cur itself: the id was scheduled again after cur finished, so a
// delivery of the new run starts a fresh record instead of being taken
// for cur. Every delivery of one scheduling carries its due time; a new
// scheduling may be due earlier than the finished one (a task cancelled
// before its due time, then scheduled again for now), so any other due
// time means another run, not only a later one.
func newer(cur *Run, m Meta) bool {
	return cur != nil && cur.State.Finished() && otherDue(cur, m)
}

// otherDue reports whether m describes another scheduling of the id than
// cur's record: both know their due times, and they differ.
func otherDue(cur *Run, m Meta) bool {
	return !m.Due.IsZero() && !cur.OfDue(m.Due)
}

// requeuedFor reports whether cur is a run a requeue brought back, not
// ended since, and m describes a delivery of it that is not the
// requeue's: a requeue gives the run and its message a token of its own
// (RequeueToken), so a message of the same due time without it was sent
// before the run died.
func requeuedFor(cur *Run, m Meta) bool {
	if cur == nil || cur.State.Finished() || !cur.OfDue(m.Due) || len(cur.Requeued) == 0 {
		return false
	}
	if isRequeueToken(cur.Token) {
		return m.Token != cur.Token
	}
	// Requeued by an earlier release (its message keeps the task's token
	// and is marked): an unmarked message before the first claim is not
	// the requeue's.
	return cur.State == Queued && cur.Attempts == 0 && !m.Queued
}

// RequeueToken is the token a requeue of the dead letter whose death is
// death (queue.DeadLetter.Death) gives the run (MarkRequeued's Meta.Token)
// and the message it sends: the same for every try of that requeue, and
// never one a mover or a client makes (those are twelve hex digits), so
// that only the requeue's message takes the run it brought back.
func RequeueToken(death string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(death))
	return fmt.Sprintf("rq%010x", h.Sum64()&(1<<40-1))
}

// isRequeueToken reports whether a run's token is a requeue's.
func isRequeueToken(token string) bool { return strings.HasPrefix(token, "rq") }

// attemptsUnderWay reports whether cur is another scheduling's run (of
// another due time) that is running or between attempts (failed and to be
// retried, snoozed), or queued and confirmed: its message carries the
// token the record does, and stands (a change of its row takes the token
// back). Taken over, such a queued run would never run: its message would
// be acknowledged as stale, and its batch never hear of it (issue 38,
// seed 1195: a batch member moved and waiting for its paused type, its id
// scheduled anew, and the callback waited for good).
func attemptsUnderWay(cur *Run, m Meta, now time.Time) bool {
	if cur == nil || !otherDue(cur, m) {
		return false
	}
	switch {
	case cur.State == Queued, cur.WaitingUnclaimed():
		// A run noted as waiting for its rate limit before any attempt
		// is still queued as far as its message goes (issue 38, seed
		// 4099: taken for a run under way, a rescheduled task waited for
		// good behind a run whose message had been acknowledged as
		// superseded); the note is written again every two minutes while
		// it waits (queue.WaitingRefresh), so the bound holds for it too.
		// Bounded: a confirmation whose take-back failed leaves a token
		// that no message may carry any more.
		return cur.Token != "" && now.Sub(cur.Updated) < QueuedWait && !mutate.On(mutate.TwoAtOnce)
	case cur.State == Running, cur.State == Failed, cur.State == Snoozed:
		return !mutate.On(mutate.TwoAtOnce)
	}
	return false
}

// QueuedWait bounds how long a run of an id scheduled again waits for an
// earlier scheduling's run that is queued and confirmed (attemptsUnderWay)
// since that record was last written: past it, the record is taken over,
// as one whose message is gone.
const QueuedWait = 5 * time.Minute

// withdrawnPlaceholder reports whether cur is only what withdrawing a due
// time left (UnconfirmDue without a record, a taken-back confirmation, or
// one whose message was acknowledged as superseded: DropBehind): queued
// (or noted as waiting for its rate) for the withdrawn due time,
// unclaimed and unconfirmed. Another scheduling's mark takes it over,
// keeping the mark.
func withdrawnPlaceholder(cur *Run, m Meta) bool {
	return (cur.State == Queued && cur.Attempts == 0 || cur.WaitingUnclaimed()) && cur.Token == "" &&
		cur.Withdrawn.has(cur.Due) && otherDue(cur, m)
}

// stored is t as the table keeps it: UTC, to the 100 ns tick.
func stored(t time.Time) time.Time { return t.UTC().Truncate(100 * time.Nanosecond) }

// noRecord is the Version a claim refused unconfirmed returns when the
// id has no record: any record found at the claim after the row check
// is then one written since.
const noRecord = "none"

// decideClaim computes the record a claim writes and its outcome, given the
// current record (nil when there is none). On ErrAlreadySucceeded the
// returned record counts the duplicate and is written; on ErrCancelled and
// ErrClaimedElsewhere nothing is written.
func decideClaim(cur *Run, id, worker string, attempt int, leaseUntil time.Time, m Meta, now time.Time) (Run, error) {
	if err := endedScheduling(cur, m); err != nil {
		// A delivery of a scheduling that ended beside the record (a
		// tokenless one, or one whose row is gone: unconfirmed only judges
		// tokens).
		return *cur, err
	}
	if unconfirmed(cur, m) {
		// The record's version, which the claim after the row check
		// passes back (Meta.RowCheckedOver): "none" without a record, and
		// nothing when the record notes a cancel of this due time already
		// (a new scheduling of a cancelled due time: its row decides).
		r := newRun(id, "")
		switch {
		case cur == nil:
			r.Version = noRecord
		case !cur.CancelledDue.has(stored(m.Due)):
			r.Version = cur.ETag
		}
		return r, ErrUnconfirmed
	}
	if requeuedFor(cur, m) {
		// A message of the run from before its death (a row sent again
		// while it was dead, a late copy), not the requeue's: run, it
		// would take the requeue's attempts, and its death would be a
		// dead letter the requeue's operation did not make, so requeued
		// again (issue 38, seed 5527).
		return *cur, ErrDead
	}
	if attemptsUnderWay(cur, m, now) {
		// Another scheduling of the id (scheduled again or replaced while
		// this run was in flight) is running or waits for its next
		// attempt: this one waits until it has ended, as its row would
		// (decideConfirmed). Taken over, the earlier run's next attempt
		// would be acknowledged as stale, and what waits for its end (its
		// children, its batch) would never hear of it.
		out := *cur
		if cur.State == Queued || cur.WaitingUnclaimed() {
			// Look again when the wait ends at the latest (the consumer
			// puts the message back until ClaimUntil, within its bounds).
			out.ClaimUntil = cur.Updated.Add(QueuedWait)
		}
		return out, ErrClaimedElsewhere
	}
	var next Run
	if cur != nil && !newer(cur, m) {
		next = *cur
		// The record counts the run's attempts, whichever message made
		// them: a second message of the run (sent twice, or delivered
		// twice) carries its own count, and by it would run attempts the
		// run has had already — up to its attempts again each (issue 38,
		// seeds 1009, 1091, 1195: an always-failing task made its first
		// attempt four times). An attempt that failed is followed by the
		// next; one cut short (a crash, or snoozed) is made again. A
		// record of another scheduling taken over counts this run's
		// attempts, not that run's (a handed-back run whose message is
		// taken for gone: a review of simulator row 99's last case).
		switch {
		case otherDue(cur, m):
		case cur.State == Failed, cur.WaitingForRate() && cur.WaitRetry:
			// (A retry held back by its rate limit shows snoozed: issue
			// 38, seed 17449.)
			attempt = max(attempt, cur.Attempts+1)
		case cur.State == Running, cur.State == Snoozed, cur.State == Queued: // Queued: handed back at shutdown
			attempt = max(attempt, cur.Attempts)
		}
		if otherDue(cur, m) {
			// The token is the other scheduling's (its early send's, or
			// its requeue's); this scheduling's messages do not carry it,
			// and kept, it would say that scheduling's message started
			// this run (SentStarted; a review of issue 38's row 164).
			// This message's own, if any, is filled in below.
			next.Token = ""
		}
		if otherDue(cur, m) && !withdrawnPlaceholder(cur, m) {
			// This run takes over the record of another scheduling that
			// has not finished (queued and unconfirmed, or handed back at
			// shutdown): a cancel of the id cancels that one too. (A
			// withdrawn due time's placeholder stands for no message that
			// may still run.)
			next.noteBehind(cur.Due)
			if cur.Token != "" || !notStarted(cur) {
				// Its confirmation stands (the take-over comes only past
				// QueuedWait): its message, held by a pause, may still
				// come, and must not be taken for stale for want of its
				// row (issue 38, seed 4954). A run that had started had
				// its message checked when it was claimed, and the mover
				// may have removed its row since (a review of row 164).
				next.ConfirmedBehind = next.ConfirmedBehind.with(cur.Due)
			}
		}
	} else {
		next = successor(cur, id, Queued)
	}
	fillMeta(&next, m)
	switch {
	case next.State == Succeeded && !mutate.On(mutate.RerunSucceeded):
		next.Duplicates++
		return next, ErrAlreadySucceeded
	case next.State == Cancelled:
		return next, ErrCancelled
	case next.State == Dead && cur != nil && (!cur.Due.IsZero() || m.Due.IsZero()):
		// (A record of an earlier release knows no due time: a message
		// that knows its own may be another scheduling's, which runs.)
		return next, ErrDead
	case next.State == Running && next.Worker != worker && next.ClaimUntil.After(now) && !mutate.On(mutate.TwoAtOnce):
		return next, ErrClaimedElsewhere
	}
	next.started(m.Due)
	next.State = Running
	next.Worker = worker
	next.Attempts = attempt
	next.Started = now
	next.ClaimUntil = leaseUntil
	return next, nil
}

func fillMeta(r *Run, m Meta) {
	if m.Token != "" {
		r.Token = m.Token
	}
	if m.Type != "" {
		r.Type = m.Type
	}
	if !m.Due.IsZero() {
		r.Due = stored(m.Due)
	}
	if m.Generation != 0 {
		r.Generation = m.Generation
	}
	if m.Seq > 0 {
		r.Seq = m.Seq
	}
	if m.Batch != "" {
		r.Batch = m.Batch
	}
	if len(m.After) > 0 {
		r.After = m.After
	}
	if series, _, ok := occurrence(r.ID); ok {
		r.Series = series
	}
}

// decideQueued computes the record a queued mark writes. write is false
// when there is nothing to write; marked reports whether the run is queued
// under this due time afterwards (so a claim can take it in one write).
// A run that has moved past queued (a consumer was quicker, or this is a
// repeated move of a row whose earlier move was delivered) is left alone,
// and so is a run a requeue brought back (its requeue's message's) against
// another message's token of its due time, which counts as marked.
func decideQueued(cur *Run, id string, m Meta) (next Run, write, marked bool) {
	switch {
	case withdrawn(cur, m) && (newer(cur, m) || notStarted(cur)):
		// A confirmation of a due time withdrawn by a change of its row
		// (issue 38, seed 1142: the sender's, late): its message is checked
		// against the row instead. A run of it that has started is
		// decided as usual.
		return *cur, false, false
	case cur != nil && cur.State == Cancelled && !m.Read.IsZero() && m.Read.Before(cur.Finished) &&
		otherDue(cur, m) && cur.CancelledDue.has(stored(m.Due)):
		// A scheduling a cancel reached beside the record (its row was
		// removed, its due time noted cancelled), marked by a traffic-cop
		// pass that began before the cancel: the pass read the row before
		// the cancel removed it and sends it late. Its mark must not take
		// the record over and forget the cancel (issue 38, sim seed
		// 51055: the task started 13 s after the cancel returned). A pass
		// begun after the cancel marks a new scheduling of that due time,
		// which runs.
		return *cur, false, false
	case cur == nil || newer(cur, m) || withdrawnPlaceholder(cur, m):
		next = successor(cur, id, Queued)
		fillMeta(&next, m)
		// The id scheduled again for a due time moved or cancelled
		// beside an earlier record: this scheduling is that one, or a new
		// one of the same due time.
		next.started(m.Due)
		return next, true, true
	case cur.State == Queued && cur.Due.Equal(stored(m.Due)):
		if m.Token != "" && cur.Token != m.Token && !isRequeueToken(cur.Token) {
			// An early-sent run is confirmed as its row is moved (not a
			// run a requeue brought back: that is its message's).
			next = *cur
			next.Token = m.Token
			return next, true, true
		}
		return *cur, false, true
	case cur.WaitingUnclaimed() && isRequeueToken(cur.Token) && m.Token != "" && m.Token != cur.Token &&
		!cur.Due.IsZero() && cur.Due.Equal(stored(m.Due)):
		// A run a requeue brought back, waiting for its rate before its
		// first claim: its requeue's message's, not another's of its due
		// time (the mover retiring the row of the early-sent message that
		// ran before the death: issue 38, seed 7969). Taken as queued
		// under that message's token, the requeue's message would be
		// acknowledged as stale and the task never run again.
		return *cur, false, true
	case cur.State == Scheduled, cur.WaitingUnclaimed() && cur.OfDue(m.Due):
		next = *cur
		next.State = Queued
		fillMeta(&next, m)
		return next, true, true
	case otherDue(cur, m) && (cur.SucceededDue.has(m.Due) || cur.DeadDue.has(m.Due)):
		// A scheduling whose run succeeded or died before another took
		// the record over, moved again: its row was left by a mover that
		// sent it and stopped before removing it (issue 38, row 206, sim
		// seed 131548: a frozen mover's commit never landed, the id was
		// replaced, and the next owner of the shard moved the row again;
		// noted behind the replacement's run, the end was forgotten and
		// the task ran twice). It has moved past queued as surely as a
		// record of its own would say: counted, nothing written, and its
		// message is acknowledged as a duplicate (README: only a new
		// scheduling of another due time runs again; one of the very
		// same due time, to the 100 ns tick, is taken for the run that
		// ended, as Confirm takes it).
		return *cur, false, true
	case otherDue(cur, m):
		// Another scheduling's run has not finished (the id was scheduled
		// again while it was in the queue or running): it is left alone,
		// and this one noted behind it, so that a cancel of the id before
		// this run starts cancels it too.
		next = *cur
		return next, next.noteBehind(m.Due), false
	}
	return *cur, false, false
}

// applyFinish computes the record Finish writes. A cancelled run stays
// cancelled: the outcome is recorded but the state is not overwritten.
func applyFinish(cur *Run, id string, state State, err error, tail string, now time.Time) Run {
	var next Run
	if cur != nil {
		next = *cur
	} else {
		next = newRun(id, "")
		fillMeta(&next, Meta{})
	}
	if next.State != Cancelled || state == Cancelled {
		next.State = state
	}
	next.Finished = now
	next.ClaimUntil = now
	if err != nil {
		next.LastError = trunc.Head(err.Error(), MaxLastError)
	}
	if tail != "" {
		next.OutputTail = trunc.Tail(tail, MaxOutputTail)
	}
	return next
}

// applySnooze computes the record Snooze writes: the attempt ended without
// an outcome and the run waits until until. Attempts and LastError are left
// as they are (a snooze is not a failure); a cancelled run stays cancelled.
func applySnooze(cur *Run, id string, until time.Time, tail string, now time.Time) Run {
	next := newRun(id, "")
	if cur != nil {
		next = *cur
	}
	if next.State != Cancelled {
		next.State = Snoozed
	}
	next.SnoozedUntil = until.UTC()
	next.Finished = now
	next.ClaimUntil = now
	if tail != "" {
		next.OutputTail = trunc.Tail(tail, MaxOutputTail)
	}
	return next
}

// applyCancel computes the record Cancel writes.
func applyCancel(cur Run, now time.Time) (Run, error) {
	if cur.State.Finished() {
		return cur, fmt.Errorf("%w: run %s is %s", ErrAlreadyFinished, cur.ID, cur.State)
	}
	cur.State = Cancelled
	cur.Finished = now
	cur.cancelBehind()
	return cur, nil
}

// ValidateID checks a run id as the run store does: 1–MaxIDLen bytes,
// none of / \ # ? ' or control characters (a series occurrence's id,
// "series@due", passes; schedule.ValidateID, for task ids, is stricter).
func ValidateID(id string) error { return validateID(id) }

func validateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: run id is empty", ErrInvalid)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: run id is %d bytes, the limit is %d", ErrInvalid, len(id), MaxIDLen)
	}
	for _, r := range id {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r == '\'' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Errorf("%w: run id %q contains %q; run ids may not contain / \\ # ? ' or control characters", ErrInvalid, id, r)
		}
	}
	return nil
}

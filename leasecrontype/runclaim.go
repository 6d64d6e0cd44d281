package leasecrontype

import (
	"errors"
	"time"
)

// RunMeta is what a worker tells a run record about a task when it claims
// the run (queue.RunRecorder's Claim), so that a run that never had a
// queued record still shows its type and due time.
type RunMeta struct {
	// Type is the handler type.
	Type string
	// Due is when the task was due. With the run id it names the run's
	// record rows.
	Due time.Time
	// Generation is the fencing generation of the leader that moved it.
	Generation int64
	// Queued reports that the run was recorded as queued before its
	// message was sent (queue.Envelope.Marked): the claim of its first
	// attempt can then take that record in one conditional write.
	Queued bool
	// Token is the token of a message the mover sent early
	// (queue.Envelope.Token). A claim of its first attempt succeeds only
	// if the run record carries the same token (the mover records it when
	// it moves the task's row) and is refused with ErrRunUnconfirmed
	// otherwise, so that the worker checks the task's row first.
	Token string
	// RowChecked reports that the task's schedule row was read for this
	// delivery and still stands for it (an early-sent message whose run
	// record did not carry its token, claimed again without it): no
	// cancel has reached it, so a cancel recorded for its due time beside
	// another scheduling of the id is not its own.
	RowChecked bool
	// RowCheckedOver is, with RowChecked, the Version of the record the
	// claim before the row check was refused over (ErrRunUnconfirmed): a
	// record changed since (or written since, after "none") that notes a
	// cancel of this due time noted it after that claim — the cancel
	// removed the row just after it was read — and refuses the claim
	// (issue 38, row 257). Empty: the row check alone decides.
	RowCheckedOver string
	// RowGone reports that the task's schedule row was read for this
	// delivery and no longer stands for it — gone, or carrying another
	// token (an early-sent message whose run record did not carry its
	// token). Claim only: a scheduling of its due time that succeeded or
	// died before another scheduling of the id took the record over is
	// taken for this message's own run, and the claim is refused with
	// that end rather than taken for a stale message's. (A due time is
	// not an identity: a new scheduling of that very due time, sent
	// early after the takeover, is taken for the ended run too.)
	// Recorders that do not know it answer as before (ErrRunUnconfirmed).
	RowGone bool
	// Seq numbers an occurrence within its series (queue.Envelope.Seq; 0
	// when unknown): the run record keeps the series' latest outcomes in
	// one summary row with a slot per Seq modulo the slots.
	Seq int64
	// Batch is the batch the task is a member of (queue.Envelope.Batch).
	Batch string
	// After lists the tasks it waited for (queue.Envelope.After).
	After []string
	// Read is when the traffic-cop pass that marks the run queued began
	// (queue.Envelope.Enqueued; the mover's marks only, zero otherwise):
	// a due time a cancel noted beside the record after then is the one
	// this pass read before the cancel removed its row, not a new
	// scheduling of that due time, and the mark is refused.
	Read time.Time
}

// A run recorder's Claim refuses with one of these (wrapped or not) when the
// delivery must not run; the queue consumer branches on them with
// errors.Is. Any other error means the claim could not be read or written
// (see queue.RunRecorder): a fault that passes puts the message back, and
// one that would not pass runs the task anyway.
var (
	// ErrRunSucceeded: the run already succeeded; the delivery is a
	// duplicate and is acknowledged without running.
	ErrRunSucceeded = errors.New("run already succeeded")
	// ErrRunCancelled: the run was cancelled; the delivery is
	// acknowledged without running.
	ErrRunCancelled = errors.New("run cancelled")
	// ErrRunDead: the run used its attempts and died (its dead letter
	// waits for a requeue, which makes it queued again); the delivery is a
	// second message of it and is acknowledged without running.
	ErrRunDead = errors.New("run already dead")
	// ErrRunClaimed: another worker runs it under a claim that has not
	// lapsed (Run.ClaimUntil says until when); the message is put back
	// until then.
	ErrRunClaimed = errors.New("run claimed by another worker")
	// ErrRunUnconfirmed: the delivery is of a message sent early
	// (RunMeta.Token) and the run record does not carry its token yet: the
	// task may have been cancelled, rescheduled or replaced since it was
	// sent. The worker checks the task's row; if it is unchanged it claims
	// again without the token, otherwise it acknowledges without running.
	ErrRunUnconfirmed = errors.New("early-sent run not confirmed")
)

// ErrClaimLost: a run recorder's Extend returns it (wrapped) when the
// worker's claim on the run is no longer its own: it lapsed and another
// delivery took the run over, or the run was cancelled or ended since. A
// delivery that learns it before its handler begins does not run it.
var ErrClaimLost = errors.New("run claim no longer this worker's")

// ErrScheduledAgain refuses to requeue a dead letter whose task id has
// been scheduled again since the task died (its run record now belongs to
// the new task): moving the old task back would take the new one's
// record. Purge the dead letter, or schedule the old work under a new id.
var ErrScheduledAgain = errors.New("the task id has been scheduled again since it died")

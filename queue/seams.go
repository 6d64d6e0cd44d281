package queue

import (
	"context"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Limiter caps how many tasks of a type run at once (across the fleet:
// trafficcop's Semaphore adapts to it). When Acquire reports !ok, or fails,
// the message is put back with a delay and the attempt is not counted.
type Limiter interface {
	// Acquire takes a slot for taskType. release is called when the task
	// ends; it is nil when !ok. A type without a limit is always ok.
	Acquire(ctx context.Context, taskType string) (release func(), ok bool, err error)
}

// SlotLimiter is a Limiter whose slots can be lost while held: a lease
// slot that could not be renewed before its lease ran out (storage failing,
// or the process paused past the lease), which another worker may then
// take. The consumer uses AcquireSlot instead of Acquire: it does not start
// a handler on a slot lost since it was acquired (the message goes back,
// no attempt counted), and it cancels a running handler's context when its
// slot is lost (context.Cause wraps ErrSlotLost), handing the task back
// without counting the attempt unless the handler still returns success.
// trafficcop's Semaphore slots are such slots (leasecron's workers use
// them).
type SlotLimiter interface {
	Limiter
	// AcquireSlot takes a slot for taskType: slot is nil, with ok, for a
	// type without a limit.
	AcquireSlot(ctx context.Context, taskType string) (slot Slot, ok bool, err error)
}

// Slot is a concurrency slot a SlotLimiter gave.
type Slot interface {
	// Held reports whether the slot is still held: its lease in force by
	// the holder's own reckoning, and not released.
	Held() bool
	// Context is done once the slot is lost or released.
	Context() context.Context
	// Release gives the slot back.
	Release(ctx context.Context) error
}

// RateLimiter holds tasks to a number of starts per time window (across
// the fleet: leasecron's rate rows). Take either records the start of
// env's task and returns 0, or returns how long until its budget frees;
// the message is then put back for that long, and the attempt is not
// counted. A type without a rate always starts.
type RateLimiter interface {
	Take(ctx context.Context, env Envelope) (wait time.Duration, err error)
}

// rateStarter is a RateLimiter that also says when the start it recorded
// was taken, on the consumer's clock (zero: no start recorded, the type
// has no rate). A delivery measures how late its answer came from then;
// from any other RateLimiter, from when it asked.
type rateStarter interface {
	TakeStart(ctx context.Context, env Envelope) (wait time.Duration, at time.Time, err error)
}

// rateMover is a rateStarter that can also move the start it recorded at
// from to now, for a delivery whose claim answered long after the take
// (refused, wait > 0, the start is taken out of the window, since the
// delivery is put back without running), and take it out for a delivery
// put back before its handler began. Any other rateStarter is asked for a
// second start instead of a move, and its starts stay counted.
type rateMover interface {
	MoveStart(ctx context.Context, env Envelope, from time.Time) (wait time.Duration, at time.Time, err error)
	ReleaseStart(ctx context.Context, env Envelope, from time.Time) error
}

// PayloadFetcher resolves claim-check references (Envelope.PayloadBlob).
// leasecron's payload blobs (leasecron/payloads/... in the container)
// implement it; the worker wires them in.
type PayloadFetcher interface {
	// Get returns the payload a reference points to.
	Get(ctx context.Context, ref string) ([]byte, error)
	// Delete removes it; deleting a missing payload is not an error.
	Delete(ctx context.Context, ref string) error
}

// RunRecorder keeps run records for the consumer: the claim that
// suppresses duplicates, its extension while the handler runs, and the
// outcome. leasecron's Runs table implements it (the worker wires it in
// unless run records are off); a program can supply its own.
//
// Every call but Claim is bookkeeping: the consumer logs a failure and
// carries on.
type RunRecorder interface {
	// Claim records that worker starts attempt (from 1) of run id, its
	// claim valid until leaseUntil, and returns the record as it now
	// stands; a returned Attempts above attempt (the record counted
	// attempts this message has not seen) is the attempt the consumer
	// makes. Two workers claiming the same run at once must not both
	// succeed (a conditional write). Instead of claiming it returns an
	// error wrapping leasecrontype.ErrRunSucceeded (the delivery is a
	// duplicate), leasecrontype.ErrRunDead (a second message of a run that
	// died), leasecrontype.ErrRunCancelled, or
	// leasecrontype.ErrRunClaimed (another worker's claim has not lapsed;
	// the returned Run's Worker and ClaimUntil say whose and until when).
	// A refusal as succeeded or dead whose returned Run has another due
	// time than m (the run of m's due time ended and the id was scheduled
	// again since) is acknowledged without telling OnEnd: the returned
	// record is another scheduling's (a message that says others wait for
	// the run has the id watched first, see ParentWatcher).
	// Any other error means the claim could not be read or written. The
	// consumer takes it for a fault that passes, and puts the message back
	// to be claimed again later, unless it wraps
	// leasecrontype.ErrNotFound, leasecrontype.ErrPreconditionFailed or
	// leasecrontype.ErrLeaseConflict, or is an HTTP response from 400 to
	// 499 other than 408 and 429 (a claim that will not be made by trying
	// again): then the task runs anyway. A recorder that cannot claim a run
	// for good should say so with one of those.
	Claim(ctx context.Context, id, worker string, attempt int, leaseUntil time.Time, m leasecrontype.RunMeta) (leasecrontype.Run, error)
	// Extend moves worker's claim on id to until. When the claim is no
	// longer worker's (another worker took the run over after it lapsed,
	// or it was cancelled or ended since) it returns an error wrapping
	// leasecrontype.ErrClaimLost: a delivery checking before its handler
	// then does not run it. Any other error before the handler leaves the
	// claim unconfirmed, and the delivery does not run then either; while
	// the handler runs, errors are logged.
	Extend(ctx context.Context, id, worker string, until time.Time) error
	// Finish records the attempt's outcome: state, the error of a failed
	// attempt (nil otherwise) and the end of its output. A cancelled run
	// stays cancelled, and a record that is already another scheduling's
	// of the id (the run was cancelled and the id scheduled again), or a
	// run another delivery has taken over, ended or requeued since this
	// one's claim lapsed, is left to it (ClaimedRunFinisher tells which).
	Finish(ctx context.Context, id string, state leasecrontype.RunState, err error, outputTail string) error
	// Snooze records that the attempt ended with leasecrontype.Snooze: the
	// run is RunSnoozed until until, with its attempts and last error
	// unchanged.
	Snooze(ctx context.Context, id string, until time.Time, outputTail string) error
}

// BehindDropper is what a RunRecorder that keeps the due times of
// schedulings moved beside another run may also do: take due off that
// list once the message of that scheduling is acknowledged without
// running as superseded, so that what waits for the id is not held for a
// run that will never start.
type BehindDropper interface {
	DropBehind(ctx context.Context, id string, due time.Time) error
}

// ParentWatcher is what a RunRecorder may also do: have the traffic cop
// watch an id and apply the end it comes to, to what waits for it (the
// worker's run records do). The consumer asks it for a second message of
// a run that says others wait for it (Envelope.Waiters) when the run
// ended before another scheduling of its id took the record over: that
// end cannot be told now (it would be taken for the other scheduling's),
// and the message may be the only one that says anyone waits.
type ParentWatcher interface {
	WatchParents(ctx context.Context, ids []string) error
}

// OwnRunFinisher is what a RunRecorder may also do: record the end of a
// delivery that holds no claim on its run (a message set aside because
// its attempts were used up before it came, or by the crash guard, or one
// run after a claim that could not be made) on that delivery's own run
// only, the one m describes as its message saw it. A record that is
// another scheduling's of the id (another due time), or whose run has
// moved on since (requeued, succeeded, confirmed under another message's
// token, running under another delivery's live claim), is left as it is
// and returned with recorded false: the consumer then sets the dead
// letter of another scheduling's run aside as usual, and acknowledges a
// used-up message of a run that moved on without one. Finish alone
// cannot tell: it ends the run the recorder last saw claimed. A recorder
// without it is sent Finish.
type OwnRunFinisher interface {
	FinishOwn(ctx context.Context, id string, m leasecrontype.RunMeta, state leasecrontype.RunState, err error, outputTail string) (found leasecrontype.Run, recorded bool, ferr error)
}

// ClaimedRunFinisher is what a RunRecorder may also do: Finish for a
// delivery that holds a claim, reporting whether the end was recorded
// and, when it was not, the record found instead. A worker whose claim
// lapsed while its handler ran may find that another delivery has since
// ended the run, requeued it, or holds it: its message is then a
// duplicate, not a death to set aside. A recorder without it is sent
// Finish, and its end taken for recorded.
type ClaimedRunFinisher interface {
	FinishClaimed(ctx context.Context, id string, state leasecrontype.RunState, err error, outputTail string) (found leasecrontype.Run, recorded bool, ferr error)
}

// Unclaimer is what a RunRecorder may also do: give back the claim it
// recorded for a delivery that is put back without running after all (a
// pause found after a slow claim, or a rate window full when its start
// was moved to the claim's end), so that the run is as it was before the
// claim, with the claimed attempt yet to be made. A recorder without it,
// and a claim made after its message's row was checked, are sent
// Finish with leasecrontype.RunQueued, as for a hand-back at shutdown
// (the attempt then stays counted).
type Unclaimer interface {
	Unclaim(ctx context.Context, id string) error
}

// WaitNoter is what a RunRecorder may also do: note that the delivery
// described by m waits, without an attempt, until until (put back for its
// type's rate limit), leaving alone a record that is not that delivery's
// run — one that has ended, another scheduling's, or an early-sent run not
// yet confirmed — and reporting whether it noted: one that did not is
// asked again at the delivery's next put-back. A recorder without it is
// sent Snooze instead.
type WaitNoter interface {
	NoteWaiting(ctx context.Context, id string, m leasecrontype.RunMeta, until time.Time, why string) (noted bool, err error)
}

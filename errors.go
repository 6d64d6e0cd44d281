package leasecron

import (
	"errors"
	"fmt"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// The errors callers branch on, with errors.Is. Every one is listed in the
// package documentation.
var (
	// ErrNotFound is wrapped by every "no such task, run, key or dead
	// letter" error of every package (leasecrontype.ErrNotFound).
	ErrNotFound = leasecrontype.ErrNotFound
	// ErrInvalidTask: Schedule, ScheduleMany or Reschedule refused the
	// task (its id, type, due time, rule, zone or payload) before anything
	// was written; the message names the bad value and what is accepted.
	ErrInvalidTask = schedule.ErrInvalid
	// ErrAlreadyScheduled: Schedule was given an id that is pending (and
	// ScheduleOptions.Replace was not set).
	ErrAlreadyScheduled = schedule.ErrAlreadyScheduled
	// ErrBatchExists: ScheduleMany was given the id of a batch that
	// exists (it wraps ErrAlreadyScheduled); nothing was written. A retry
	// of a call that went unanswered meets its own batch so: Batch and
	// BatchMembers tell whether that call sealed it (the HTTP API answers
	// an identical retry as the first call, from them).
	ErrBatchExists = fmt.Errorf("%w: batch already exists", ErrAlreadyScheduled)
	// ErrBulkExists: StartBulkAs was given the id of a bulk operation that
	// exists (it wraps ErrAlreadyScheduled); nothing was started. A resend
	// of a start that went unanswered meets its own operation so: Bulk
	// tells whether it is the one asked for (the HTTP API answers an
	// identical resend as the first).
	ErrBulkExists = fmt.Errorf("%w: %w", ErrAlreadyScheduled, runs.ErrBulkExists)
	// ErrAlreadyFinished: Cancel found the run already succeeded or dead
	// (a run already cancelled is no error: a cancel is idempotent).
	ErrAlreadyFinished = runs.ErrAlreadyFinished
	// ErrAlreadySent: Cancel, Reschedule or Schedule with Replace was
	// refused because the task's message is already in the queue (enqueued
	// early, invisible until due) and run records are off, so workers could
	// not tell that it changed. With run records the change is made and the
	// early message becomes a no-op.
	ErrAlreadySent = schedule.ErrAlreadySent
	// ErrBeingCancelled: Reschedule or RunNow was refused because a cancel
	// of the task holds its row while it tells the task's batch and the
	// tasks waiting for it that it was cancelled (or failed after telling
	// them): cancel it again, or wait for the cancel to end.
	ErrBeingCancelled = schedule.ErrBeingCancelled
	// ErrInvalidRunQuery: Runs was given a query it cannot answer (an
	// unknown state, a continuation token from another query, ...).
	ErrInvalidRunQuery = runs.ErrInvalid
	// ErrNoRunRecords: the call needs run records and they are off
	// (ClientOptions.NoRuns; worker.runs: false).
	ErrNoRunRecords = errors.New("run records are off (worker.runs: false)")
	// ErrInvalidOptions is wrapped by NewWorker's and NewClient's refusals
	// of their options; the message names the field, the bad value and
	// what is accepted.
	ErrInvalidOptions = errors.New("invalid leasecron options")
	// ErrServerBusy is wrapped by errors of storage requests the service
	// refused as busy (503 ServerBusy, 500 OperationTimedOut, 429) after
	// the SDK's own retries: trying again later may succeed
	// (leasecrontype.ErrServerBusy).
	ErrServerBusy = leasecrontype.ErrServerBusy
	// ErrDuplicate: Schedule with ScheduleOptions.Unique found the key held
	// by another task and created nothing; the error is a *DuplicateError
	// naming that task, and the returned Item carries its id.
	ErrDuplicate = schedule.ErrDuplicate
	// ErrShardCountChanged: Schedule with ScheduleOptions.Unique placed
	// its key by a shard count that changed under it, and the second try
	// met a change too; nothing was written, and trying again places it by
	// the count in force. The HTTP API answers it 503 with Retry-After.
	ErrShardCountChanged = schedule.ErrShardCountChanged
	// ErrInvalidProgress: Progress was given a percent outside 0–100
	// (leasecrontype.ErrInvalidProgress).
	ErrInvalidProgress = leasecrontype.ErrInvalidProgress
	// ErrDrained is returned by Worker.Run when the worker stopped because
	// it was drained (Client.Drain): it took no new work once it saw the
	// request, finished what it ran and released what it held.
	// `leasecron worker` exits 0 on it.
	ErrDrained = errors.New("worker drained")
	// ErrNotDrainable: Drain found the instance running but not looking
	// for drain requests (an earlier release, or WorkerOptions.DrainCheck
	// negative); SIGTERM drains it the same way.
	ErrNotDrainable = errors.New("instance cannot be drained")
	// ErrIncomplete: the call made its change, but a step after it failed
	// (a storage error, wrapped beside it); the call is safe to repeat and
	// a repeat finishes the job. Disable returns it when the series is
	// disabled but occurrences already moved to the queue could not all be
	// stopped (until a repeat succeeds, one of them may still run once), or
	// another row of a series written without an id index could not be
	// removed (a repeat of the disable cannot reach it: the error says to
	// cancel the series).
	// Cancel returns it when a series is cancelled but an occurrence
	// already moved to the queue could not be marked; there a repeat of
	// the series' cancel finds it gone, so cancel the occurrence by its id
	// (the error names how to list it), or when another row of a series
	// written without an id index (an insert an SDK retried after the
	// traffic cop moved the row) could not be removed: a repeat removes
	// it. It returns it too when a one-off
	// task's row is removed but its run record could not be marked
	// cancelled: the task may have been on its way to the queue, and may
	// run once unless a repeat of the cancel marks it. ScheduleMany
	// returns it, beside the tasks' results, when the tasks were written
	// but their batch could not be sealed: that one is not safe to repeat
	// (the batch's id is taken), and the batch's callback may never run;
	// and when none of the tasks was written and the batch the call wrote
	// could not be taken back (its id stays taken).
	ErrIncomplete = errors.New("done in part")
)

// conflicts are the errors IsConflict reports.
var conflicts = []error{
	ErrAlreadyScheduled, ErrAlreadyFinished, ErrAlreadySent, ErrBeingCancelled,
	ErrNoRunRecords, ErrDuplicate, queue.ErrNotRequeueable, ErrNotDrainable,
}

// IsConflict reports whether err is, or wraps, a state that forbids the
// request rather than a failure: an id already scheduled, a run already
// ended, sent to the queue or being cancelled, a call that needs run
// records while they are off, a unique key held, a dead letter that
// cannot be requeued, or an instance that cannot be drained. Sending the
// same request again gets the same answer until that state changes. The
// HTTP API and the dashboard answer these 409 Conflict.
func IsConflict(err error) bool {
	for _, c := range conflicts {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

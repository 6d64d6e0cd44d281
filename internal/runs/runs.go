// Package runs keeps the Runs table: one row per run id recording what
// happened to a task (its visible state, attempts, worker, times, last error
// and output tail), plus one counters row per worker instance.
//
// Runs are bookkeeping. Every write that need not be conditional is an
// upsert (merge), so a missing row never breaks the pipeline, and callers
// are expected to log a failed write and carry on: a Runs-table outage must
// not stop tasks from being handled. The one decision the table takes part
// in is the claim (duplicate suppression): Claim is a conditional write on
// the row's ETag, so of two workers that receive the same message at once
// only one wins. If the claim itself cannot be read or written the consumer
// runs the task anyway — at-least-once beats exactly-once.
//
// What this package does not guarantee: a claim is a lease on the row that
// lasts until its expiry (extended while the handler runs); a worker that
// stalls past that expiry without noticing can still finish after another
// worker took the run over, and claims compare expiry times written by one
// worker's clock with another's, so clock skew between workers lengthens or
// shortens a claim by the skew. Handlers must be idempotent.
//
// Layout: PartitionKey is a hash bucket "r0".."rf" of the run id (16
// partitions spread the write load; Get and the conditional writes address
// one row), RowKey is the run id. Counters rows live in partition "~stats"
// with the instance id as RowKey.
package runs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

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

// Run is one row of the Runs table.
type Run struct {
	// ID is the run id (the task id, or "{series}@{due}" for an occurrence).
	ID string
	// State is the visible state.
	State State
	// Type is the handler type.
	Type string
	// Attempts is the number of the latest attempt (1 for the first).
	Attempts int
	// Worker is the instance that ran (or runs) the latest attempt.
	Worker string
	// Started is when the latest attempt started.
	Started time.Time
	// Finished is when the latest attempt ended (or the run was cancelled).
	Finished time.Time
	// LastError is the error of the latest failed attempt; it is kept after
	// a later success so that a flaky task stays visible.
	LastError string
	// OutputTail is the end of the latest attempt's output (at most
	// MaxOutputTail bytes).
	OutputTail string
	// Deliveries counts queue deliveries that reached a claim.
	Deliveries int
	// Duplicates counts deliveries acknowledged without running because the
	// run had already succeeded.
	Duplicates int
	// Generation is the fencing generation of the leader that moved it.
	Generation int64
	// Due is when the task was scheduled to run.
	Due time.Time
	// ClaimUntil is when the current claim lapses; a running run whose
	// claim has lapsed may be taken over by another worker.
	ClaimUntil time.Time
	// SnoozedUntil is when a snoozed run runs again (see snooze.go).
	SnoozedUntil time.Time
	// Updated is the service's last-modified time of the row.
	Updated time.Time

	etag string
}

// Meta is what a claim records about the task besides the claim itself
// (leasecrontype.RunMeta, the public shape queue.RunRecorder speaks).
type Meta = leasecrontype.RunMeta

// Filter selects runs for List. The zero value selects every run.
type Filter struct {
	// States, when not empty, keeps runs in one of these states.
	States []State
	// Type, when set, keeps runs of this handler type.
	Type string
	// Limit, when > 0, returns at most this many runs (the most recently
	// updated).
	Limit int
}

// Limits on stored text.
const (
	// MaxOutputTail is the most output kept per run, in bytes (the end is kept).
	MaxOutputTail = 4 << 10
	// MaxLastError is the most error text kept per run, in bytes.
	MaxLastError = 4 << 10
)

// Sentinel errors.
var (
	// ErrNotFound: no row for this run id.
	ErrNotFound = notfound.New("run not found")
	// ErrAlreadySucceeded: Claim found the run succeeded; the delivery is a
	// duplicate and must be acknowledged without running.
	ErrAlreadySucceeded = leasecrontype.ErrRunSucceeded
	// ErrCancelled: Claim found the run cancelled; acknowledge without running.
	ErrCancelled = leasecrontype.ErrRunCancelled
	// ErrClaimedElsewhere: Claim found the run running on another worker
	// whose claim has not lapsed; put the message back for later.
	ErrClaimedElsewhere = leasecrontype.ErrRunClaimed
	// ErrAlreadyFinished: Cancel found the run already finished.
	ErrAlreadyFinished = errors.New("run already finished")
	// ErrContention: a conditional write kept losing to concurrent writers.
	ErrContention = errors.New("run row changed concurrently too many times")
	// ErrInvalid: an argument was refused before anything was written.
	ErrInvalid = errors.New("invalid run argument")
)

// maxTries bounds read-modify-write loops on one row.
const maxTries = 5

// Partition keys.
const (
	bucketPrefix = "r"
	statsPK      = "~stats"
)

// partitionFor returns the hash bucket ("r0".."rf") of a run id.
func partitionFor(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%s%x", bucketPrefix, h.Sum32()%16)
}

// decideClaim computes the row a claim writes and its outcome, given the
// current row (nil when there is none). On ErrAlreadySucceeded, ErrCancelled
// and ErrClaimedElsewhere the returned row still records the delivery and is
// written too.
func decideClaim(cur *Run, id, worker string, attempt int, leaseUntil time.Time, m Meta, now time.Time) (Run, error) {
	var next Run
	if cur != nil {
		next = *cur
	} else {
		next = Run{ID: id, State: Queued}
	}
	next.Deliveries++
	fillMeta(&next, m)
	switch {
	case next.State == Succeeded:
		next.Duplicates++
		return next, ErrAlreadySucceeded
	case next.State == Cancelled:
		return next, ErrCancelled
	case next.State == Running && next.Worker != worker && next.ClaimUntil.After(now):
		return next, ErrClaimedElsewhere
	}
	next.State = Running
	next.Worker = worker
	next.Attempts = attempt
	next.Started = now
	next.ClaimUntil = leaseUntil
	return next, nil
}

func fillMeta(r *Run, m Meta) {
	if m.Type != "" {
		r.Type = m.Type
	}
	if !m.Due.IsZero() {
		r.Due = m.Due
	}
	if m.Generation != 0 {
		r.Generation = m.Generation
	}
}

// applyQueued computes the row MarkQueued writes; write is false when the
// run has already moved past queued (a consumer was quicker than the mover's
// bookkeeping) and only its metadata may be filled in.
func applyQueued(cur *Run, id string, m Meta) Run {
	if cur == nil {
		r := Run{ID: id, State: Queued}
		fillMeta(&r, m)
		return r
	}
	next := *cur
	fillMeta(&next, m)
	if next.State == "" || next.State == Scheduled {
		next.State = Queued
	}
	return next
}

// applyFinish computes the row Finish writes. A cancelled run stays
// cancelled: the outcome is recorded but the state is not overwritten.
func applyFinish(cur *Run, id string, state State, err error, tail string, now time.Time) Run {
	var next Run
	if cur != nil {
		next = *cur
	} else {
		next = Run{ID: id}
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

// applyCancel computes the row Cancel writes.
func applyCancel(cur Run, now time.Time) (Run, error) {
	if cur.State.Finished() {
		return cur, fmt.Errorf("%w: run %s is %s", ErrAlreadyFinished, cur.ID, cur.State)
	}
	cur.State = Cancelled
	cur.Finished = now
	return cur, nil
}

// matches reports whether r passes f (ignoring Limit).
func (f Filter) matches(r Run) bool {
	if f.Type != "" && r.Type != f.Type {
		return false
	}
	if len(f.States) == 0 {
		return true
	}
	for _, s := range f.States {
		if r.State == s {
			return true
		}
	}
	return false
}

func validateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: run id is empty", ErrInvalid)
	}
	if len(id) > 1024 {
		return fmt.Errorf("%w: run id is %d bytes, the limit is 1024", ErrInvalid, len(id))
	}
	for _, r := range id {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Errorf("%w: run id %q contains %q; table keys may not contain / \\ # ? or control characters", ErrInvalid, id, r)
		}
	}
	return nil
}

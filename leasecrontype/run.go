package leasecrontype

import (
	"fmt"
	"strings"
	"time"
)

// RunState is a run's visible state, the words `leasecron status`, the
// dashboard and the Runs table use.
type RunState string

// The states of a run. A run moves scheduled → queued → running →
// succeeded, or running → failed → running … → dead, and running →
// snoozed → running when its handler snoozes; cancelled can be set from any
// state that is not finished.
const (
	// RunScheduled: a row waits in the schedule table.
	RunScheduled RunState = "scheduled"
	// RunQueued: the task is on the work queue.
	RunQueued RunState = "queued"
	// RunRunning: a worker has claimed it and its handler is running.
	RunRunning RunState = "running"
	// RunSucceeded: the handler returned nil. Finished.
	RunSucceeded RunState = "succeeded"
	// RunFailed: the last attempt failed; another attempt will follow.
	RunFailed RunState = "failed"
	// RunDead: the last allowed attempt failed; the message was set aside
	// in the poison queue. Finished (until requeued).
	RunDead RunState = "dead"
	// RunCancelled: cancelled by a user; a delivery is acknowledged
	// without running. Finished.
	RunCancelled RunState = "cancelled"
	// RunSnoozed: the handler asked to run again later (Snooze); the
	// message is hidden until SnoozedUntil and the attempt not counted.
	RunSnoozed RunState = "snoozed"
)

// RunStates lists every state, in lifecycle order.
func RunStates() []RunState {
	return []RunState{RunScheduled, RunQueued, RunRunning, RunSnoozed, RunSucceeded, RunFailed, RunDead, RunCancelled}
}

// Finished reports whether s is a final state (succeeded, dead, cancelled).
func (s RunState) Finished() bool { return s == RunSucceeded || s == RunDead || s == RunCancelled }

// Valid reports whether s is one of RunStates.
func (s RunState) Valid() bool {
	for _, x := range RunStates() {
		if s == x {
			return true
		}
	}
	return false
}

// ParseRunState parses a state name (case-insensitive), naming the accepted
// values on error.
func ParseRunState(s string) (RunState, error) {
	st := RunState(strings.ToLower(strings.TrimSpace(s)))
	if !st.Valid() {
		names := make([]string, 0, 8)
		for _, x := range RunStates() {
			names = append(names, string(x))
		}
		return "", fmt.Errorf("unknown run state %q: want one of %s", s, strings.Join(names, ", "))
	}
	return st, nil
}

// Run is a task's run record: what happened to one run id.
type Run struct {
	// ID is the run id (the task id, or "{series}@{due}" for an occurrence).
	ID string
	// State is the visible state.
	State RunState
	// Type is the handler type.
	Type string
	// Series is the recurring series of an occurrence; empty for a one-off
	// task.
	Series string
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
	// SnoozedUntil is when a snoozed run runs again (the latest snooze;
	// kept after the run moves on).
	SnoozedUntil time.Time
	// Progress is the last progress the handler reported
	// (leasecron.Progress, an exec handler's progress line, an HTTP
	// endpoint's 1xx Leasecron-Progress header); At is zero when it never
	// did. It is kept after the run ends.
	Progress RunProgress
	// Batch is the batch the task is a member of, or whose completion
	// callback it is; After the tasks it waited for.
	Batch string
	After []string
	// Updated is the service's last-modified time of the record.
	Updated time.Time
	// Version is set on a claim's refusal with ErrRunUnconfirmed only: the
	// version of the record the claim met (its entity's ETag, or "none"
	// when there was no record), which the claim made once the task's row
	// is checked passes back (RunMeta.RowCheckedOver). Empty elsewhere,
	// and when the recorder leaves the row check alone to decide.
	Version string
}

// OfDue reports whether r may be the record of the scheduling of its id
// due at due: r knows no due time (a record of an earlier release), or
// the same one, to the table's 100 ns tick. A record of another due time
// is another scheduling's (the id was scheduled again).
func (r Run) OfDue(due time.Time) bool {
	return r.Due.IsZero() || r.Due.Equal(due.UTC().Truncate(100*time.Nanosecond))
}

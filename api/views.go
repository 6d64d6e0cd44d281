package api

import (
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/queue"
)

// Task is a pending task as the API shows it.
type Task struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Due         time.Time `json:"due"`
	Recurrence  string    `json:"recurrence,omitempty"`
	TZ          string    `json:"tz,omitempty"`
	Payload     string    `json:"payload,omitempty"`
	PayloadBlob string    `json:"payload_blob,omitempty"`
	MaxAttempts int       `json:"max_attempts,omitempty"`
	Queue       string    `json:"queue,omitempty"`
	Priority    int       `json:"priority,omitempty"`
	FairKey     string    `json:"fair_key,omitempty"`
	UniqueKey   string    `json:"unique_key,omitempty"`
	After       []string  `json:"after,omitempty"`
	AfterAny    bool      `json:"after_any,omitempty"`
	Batch       string    `json:"batch,omitempty"`
	Callback    bool      `json:"callback,omitempty"`
	Waiting     bool      `json:"waiting,omitempty"`
	Disabled    time.Time `json:"disabled,omitzero"`
}

func taskOf(it leasecron.Item) Task {
	return Task{ID: it.ID, Type: it.Type, Due: it.Due.UTC(), Recurrence: it.Recurrence, TZ: it.TZ, Payload: it.Payload, PayloadBlob: it.PayloadBlob,
		MaxAttempts: it.MaxAttempts, Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey, UniqueKey: it.UniqueKey,
		After: it.After, AfterAny: it.AfterAny, Batch: it.Batch, Callback: it.Callback, Waiting: it.Waiting, Disabled: it.Disabled}
}

// TaskResult is the answer of the calls that schedule or change a task.
type TaskResult struct {
	Task Task `json:"task"`
}

// Run is a run record as the API shows it (the dashboard's JSON).
type Run = dashboard.RunView

func runsOf(rs []leasecron.Run) []Run {
	out := make([]Run, len(rs))
	for i, r := range rs {
		out[i] = dashboard.RunViewOf(r)
	}
	return out
}

// TaskStatus is GET /api/v1/tasks/{id}: the pending task and its run
// record, whichever exist, and their state in one word.
type TaskStatus struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Task  *Task  `json:"task,omitempty"`
	Run   *Run   `json:"run,omitempty"`
}

// Type is the task's type, from its row or its run.
func (s TaskStatus) Type() string {
	switch {
	case s.Task != nil:
		return s.Task.Type
	case s.Run != nil:
		return s.Run.Type
	}
	return ""
}

func statusOf(st leasecron.Status) TaskStatus {
	out := TaskStatus{ID: st.ID, State: st.State()}
	if st.Pending != nil {
		t := taskOf(*st.Pending)
		out.Task = &t
	}
	if st.Run != nil {
		r := dashboard.RunViewOf(*st.Run)
		out.Run = &r
	}
	return out
}

// ScheduleResult is one task of a schedule-many request: Status is
// scheduled, invalid, duplicate (the id is pending), held (its unique key
// is, by Holder), not_written or moved.
type ScheduleResult struct {
	Index  int       `json:"index"`
	ID     string    `json:"id,omitempty"`
	Status string    `json:"status"`
	Due    time.Time `json:"due,omitzero"`
	Error  string    `json:"error,omitempty"`
	Holder string    `json:"holder,omitempty"`
}

// ScheduleManyResult is the answer of POST /api/v1/tasks:many.
type ScheduleManyResult struct {
	Scheduled int              `json:"scheduled"`
	Batch     string           `json:"batch,omitempty"`
	Results   []ScheduleResult `json:"results"`
}

// CancelResult is the answer of POST /api/v1/tasks/{id}/cancel.
type CancelResult struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
	Marked  bool   `json:"marked"`
}

// TaskList is a page of pending tasks.
type TaskList struct {
	Tasks    []Task `json:"tasks"`
	Continue string `json:"continue,omitempty"`
}

// RunList is a page of run records.
type RunList struct {
	Runs     []Run  `json:"runs"`
	Continue string `json:"continue,omitempty"`
}

// SearchResult is GET /api/v1/search: the task an exact id names, or a
// page of runs.
type SearchResult struct {
	Exact    *TaskStatus `json:"exact,omitempty"`
	Runs     []Run       `json:"runs"`
	Continue string      `json:"continue,omitempty"`
}

// PausedList is GET /api/v1/paused.
type PausedList struct {
	Paused []leasecron.Pause `json:"paused"`
}

// PauseResult is the answer of pause and resume.
type PauseResult struct {
	Type  string    `json:"type"`
	Until time.Time `json:"until,omitzero"`
}

// BulkList is GET /api/v1/bulk.
type BulkList struct {
	Operations []leasecron.Bulk `json:"operations"`
}

// DeadLetter is a message set aside in the poison queue.
type DeadLetter = queue.DeadLetter

// DeadLetterList is GET /api/v1/dead-letters: the first dead letters and
// how many there are.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Total       int          `json:"total"`
}

// RequeueResult is the answer of a dead letter's requeue.
type RequeueResult struct {
	ID string `json:"id"`
}

// DeadLettersDone is the answer of requeue-all (Requeued) and purge
// (Purged).
type DeadLettersDone struct {
	Requeued int `json:"requeued"`
	Purged   int `json:"purged"`
}

// Health is GET /api/v1/health: ok, or degraded when no instance leads or
// due tasks wait over a minute.
type Health struct {
	Status        string   `json:"status"`
	Leader        string   `json:"leader,omitempty"`
	Instances     int      `json:"instances"`
	QueueDepth    int      `json:"queue_depth"`
	DeadLetters   int      `json:"dead_letters"`
	DueCount      int      `json:"due_count"`
	DueLagSeconds float64  `json:"due_lag_seconds"`
	PausedTypes   []string `json:"paused_types"`
}

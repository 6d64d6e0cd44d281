package leasecrontype

import (
	"context"
	"errors"
	"io"
	"time"
)

// Task is what a handler receives: one attempt at one run.
type Task struct {
	// ID is the run id: the task id, or "{series}@{due RFC 3339}" for an
	// occurrence of a recurring series. Handlers see it as
	// LEASECRON_TASK_ID.
	ID string
	// Series is the recurring series id, empty for one-off tasks.
	Series string
	// Type is the handler type.
	Type string
	// Payload is the task's data (fetched from its blob if it was large).
	Payload []byte
	// Due is when the task was scheduled to run.
	Due time.Time
	// Attempt is this attempt's number, starting at 1.
	Attempt int
	// Generation is the fencing generation of the leader that moved it.
	Generation int64
	// Key is the blackboard key when the task comes from the blackboard.
	Key string
	// Batch is the id of the batch the task is a member of, or whose
	// completion callback it is; empty otherwise. Handlers see it as
	// LEASECRON_BATCH.
	Batch string
	// Completed is set for a batch's completion callback: how the batch's
	// members ended. Nil for every other task.
	Completed *BatchCounts
}

// BatchCounts are how the members of a batch ended (and, while it is open,
// how many have): a batch is complete when Succeeded+Dead+Cancelled
// reaches Total.
type BatchCounts struct {
	// Total is the number of members.
	Total int `json:"total"`
	// Succeeded, Dead and Cancelled count the members that ended so.
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Cancelled int `json:"cancelled"`
}

// Ended is how many members have ended.
func (b BatchCounts) Ended() int { return b.Succeeded + b.Dead + b.Cancelled }

// Handler runs one task. A nil return means success; an error (or a panic)
// is a failed attempt that will be retried with backoff. Handlers must be
// idempotent: delivery is at least once.
type Handler func(ctx context.Context, t Task) error

// MaxOutputTail is how much of a task's output, in bytes, is kept for its
// run record (the end is kept).
const MaxOutputTail = 4 << 10

type outputKey struct{}

// WithOutputWriter returns a context whose Output is w. The queue consumer
// gives every handler such a context; tests of a handler can use it to see
// what the handler printed.
func WithOutputWriter(ctx context.Context, w io.Writer) context.Context {
	return context.WithValue(ctx, outputKey{}, w)
}

// Output returns a writer for the running task's output. Whatever a
// handler writes there is kept (its last MaxOutputTail bytes) and recorded
// in the run record when the attempt ends, whether it succeeds or fails.
// Outside a handler it returns io.Discard.
func Output(ctx context.Context) io.Writer {
	if w, ok := ctx.Value(outputKey{}).(io.Writer); ok && w != nil {
		return w
	}
	return io.Discard
}

// WithOutput returns err carrying output: a handler that captured its
// output elsewhere (an exec handler's stderr, say) returns its failure this
// way and the consumer records tail in the run record. WithOutput(nil, …)
// is nil.
func WithOutput(err error, tail string) error {
	if err == nil {
		return nil
	}
	return &outputError{err: err, tail: tail}
}

// OutputOf returns the output carried by err (see WithOutput), or "".
func OutputOf(err error) string {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe.tail
	}
	return ""
}

type outputError struct {
	err  error
	tail string
}

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

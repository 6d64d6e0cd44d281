package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// EnvelopeVersion is the current envelope format version.
const EnvelopeVersion = 1

// Envelope is the JSON body of every work-queue message. Its field names are
// a public contract: tools in other languages may read the queue.
type Envelope struct {
	// V is the format version (EnvelopeVersion).
	V int `json:"v"`
	// ID is the run id: the task id for a one-off task, or
	// "{series}@{due RFC 3339 UTC}" for an occurrence of a recurring series.
	ID string `json:"id"`
	// Series is the recurring series id, empty for one-off tasks.
	Series string `json:"series,omitempty"`
	// Type selects the handler.
	Type string `json:"type"`
	// Queue is the named queue the message was sent to; empty for the
	// default queue (see Route).
	Queue string `json:"queue,omitempty"`
	// Priority is its priority level, 1 (highest) to 4; 0 for the default
	// level 3.
	Priority int `json:"priority,omitempty"`
	// FairKey is the key (a tenant, a customer) whose share of the fleet
	// the task counts towards: its message goes to the fairness lane of
	// the key (see ClientOptions.FairLanes).
	FairKey string `json:"fair_key,omitempty"`
	// Payload is the task's data, inline.
	Payload string `json:"payload,omitempty"`
	// PayloadBlob, when set, names the blob holding a payload too large to
	// travel inline (claim check); Payload is then empty.
	PayloadBlob string `json:"payload_blob,omitempty"`
	// Due is when the task was scheduled to run.
	Due time.Time `json:"due"`
	// Enqueued is when the mover put it on the queue.
	Enqueued time.Time `json:"enqueued"`
	// FailedAttempts counts the attempts already made and failed (0 on the
	// first delivery); the attempt a delivery makes is FailedAttempts+1, the
	// number Task.Attempt and the run record carry. (Its JSON name,
	// "attempt", is the wire format's.)
	FailedAttempts int `json:"attempt"`
	// MaxAttempts overrides the worker's retry.max_attempts when > 0.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Recurrence is the series' rule ("@every 10m" or a cron expression).
	Recurrence string `json:"recurrence,omitempty"`
	// Seq numbers an occurrence within its series (1, 2, ... as the mover
	// sends them; 0 for one-off tasks and messages of older movers). Run
	// records use it to keep a series' latest outcomes in one row.
	Seq int64 `json:"seq,omitempty"`
	// Generation is the fencing generation of the leader that moved it.
	Generation int64 `json:"generation,omitempty"`
	// LastError is the error of the last failed attempt.
	LastError string `json:"last_error,omitempty"`
	// Marked reports that the run was recorded as queued (run records)
	// before this message was sent, so that a worker claims its first
	// attempt in one conditional write. A message without it is claimed
	// correctly too, at the cost of a read.
	Marked bool `json:"marked,omitempty"`
	// UniqueKey is the unique key the task holds, if any (a rate limit
	// may budget per key).
	UniqueKey string `json:"unique_key,omitempty"`
	// UniqueFor (whole seconds) and UniqueStates (comma-separated run
	// states) are that key's window and states as the task was scheduled
	// with (empty: the defaults; a message of an earlier release carries
	// neither), so that a requeue once it died takes the key again as it
	// held it.
	UniqueFor    int64  `json:"unique_for,omitempty"`
	UniqueStates string `json:"unique_states,omitempty"`
	// TraceParent is the W3C traceparent of the span the run's spans are
	// children of (the move, whose parent is the schedule row's
	// TraceParent); empty when the task is not traced.
	TraceParent string `json:"traceparent,omitempty"`
	// Snoozes counts the times the handler snoozed this run (see
	// leasecrontype.Snooze); past ConsumerOptions.MaxSnoozes a snooze is a
	// failed attempt.
	Snoozes int `json:"snoozes,omitempty"`
	// Waiting is why the task was put back before it started (its rate
	// limit), once that is recorded on its run; empty otherwise.
	Waiting string `json:"waiting,omitempty"`
	// WaitingAt is when Waiting was last recorded on the run (zero in a
	// message of an earlier release): the note is written again every
	// WaitingRefresh while the task waits, so that its run, if its
	// message was sent early and confirmed, is known to be waiting.
	WaitingAt time.Time `json:"waiting_at,omitzero"`
	// Dequeues is the service's dequeue count of this message when a worker
	// last rewrote it (after a failed attempt, a deferral or a release at
	// shutdown). Deliveries beyond it had no outcome recorded — a worker
	// crashed on them — and count towards the poison-message guard.
	Dequeues int64 `json:"dequeues,omitempty"`
	// Token is set on a message the mover sent early, before its row left
	// the schedule table: the row records it (property Sent), and a worker
	// with run records checks that the run record or the row still carries
	// it before running, so a task cancelled, rescheduled, replaced or
	// deleted after the early enqueue is acknowledged without running. A
	// requeued dead letter's message carries its requeue's token instead
	// (runs.RequeueToken, which its run record carries): messages of the
	// task from before its death do not take the run it brought back.
	Token string `json:"token,omitempty"`
	// Row is the schedule row ("{shard}/{RowKey}") an early-sent message
	// came from (with Token), and RowETag its ETag when the mover read it:
	// until the pass's mark lands (just after the send), the row still at
	// that ETag and key stands for the message too, marked by an earlier
	// pass or not (a series' row carries the token it reuses).
	Row     string `json:"row,omitempty"`
	RowETag string `json:"row_etag,omitempty"`
	// Batch is the batch the task is a member of (or, with Completed, the
	// batch whose completion callback it is).
	Batch string `json:"batch,omitempty"`
	// Completed is set on a batch's completion callback: how its members
	// ended.
	Completed *leasecrontype.BatchCounts `json:"completed,omitempty"`
	// After lists the tasks this one waited for (recorded on its run).
	After []string `json:"after,omitempty"`
	// RequeuedBy is the bulk operation that last moved this task back from
	// the dead letters (empty when none did, or it was requeued by hand):
	// the operation leaves the task's next dead letter alone, so it
	// requeues each task it matched once however often it walks.
	RequeuedBy string `json:"requeued_by,omitempty"`
	// RequeuedBefore lists the bulk operations that moved this task back
	// before RequeuedBy, the latest first (at most MaxRequeuedBefore): an
	// operation leaves the task alone even when another operation
	// requeued it since (issue 38, seed 3932: two requeues of one type at
	// once passed a task back and forth, each bringing it back twice).
	RequeuedBefore []string `json:"requeued_before,omitempty"`
	// Waiters says that tasks were waiting for this one when its message
	// was sent (scheduled with After): its end releases or cancels them
	// (ConsumerOptions.OnEnd).
	Waiters bool `json:"waiters,omitempty"`
	// Ended, when set, is how this message's run ended (succeeded or
	// cancelled) when its batch or dependents could not be told: the
	// message was put back to tell them, and its next delivery does so
	// and goes, whatever the run record says by then (the id may have
	// been scheduled again and its record taken over by the new
	// scheduling, which knows nothing of this run: issue 38, seed 9432).
	// A worker of an earlier release ignores it and tells them from the
	// record, as before.
	Ended leasecrontype.RunState `json:"ended,omitempty"`
	// EndOnly marks a message of its own that carries a run's end (Ended)
	// beside the run's message, which could not carry it (Consumer's
	// sendEnd): telling the end does not delete the payload blob, which
	// the run's message names too. A worker of an earlier release takes
	// it for one more delivery of the run.
	EndOnly bool `json:"end_only,omitempty"`
	// EndedAt, on a cancel's message of its own (EndOnly), is when the
	// cancel sent it: a task that began waiting for the id after then
	// waits for a later scheduling of it and is not told (its dependency
	// written later, by its writer's clock). A worker of an earlier
	// release ignores it.
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// Ends reports whether the end of e's run matters beyond its own record:
// it is a batch member or has waiting dependents (ConsumerOptions.OnEnd).
func (e Envelope) Ends() bool { return e.Waiters || (e.Batch != "" && e.Completed == nil) }

// runMeta is what a run record learns about the task from e.
func (e Envelope) runMeta() leasecrontype.RunMeta {
	return leasecrontype.RunMeta{Type: e.Type, Due: e.Due, Generation: e.Generation, Queued: e.Marked, Token: e.Token, Seq: e.Seq, Batch: e.Batch, After: e.After}
}

// ErrMalformed is wrapped by DecodeEnvelope errors: the message is not a
// leasecron envelope and is set aside, not retried.
var ErrMalformed = errors.New("malformed message")

// Encode returns the JSON form of e.
func (e Envelope) Encode() (string, error) {
	if e.V == 0 {
		e.V = EnvelopeVersion
	}
	b, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("encode envelope %s: %w", e.ID, err)
	}
	return string(b), nil
}

// DecodeEnvelope parses a queue message body. Anything that is not a valid
// envelope (not JSON, truncated, missing id or type, unknown version) is
// reported with ErrMalformed and the reason.
func DecodeEnvelope(body string) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: not a JSON envelope: %w", ErrMalformed, err)
	}
	switch {
	case e.V != EnvelopeVersion:
		return Envelope{}, fmt.Errorf("%w: envelope version %d, this worker understands %d", ErrMalformed, e.V, EnvelopeVersion)
	case e.ID == "":
		return Envelope{}, fmt.Errorf("%w: envelope has no id", ErrMalformed)
	case e.Type == "":
		return Envelope{}, fmt.Errorf("%w: envelope %s has no type", ErrMalformed, e.ID)
	}
	return e, nil
}

package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// Sending a task due now. Whoever makes a task (or a series' first
// occurrence) due within the mover's next pass sends its message at once instead of waiting for the
// pass (leasecron's Client does it for Schedule, ScheduleMany and RunNow):
//
//  1. write the row with AddOptions.Sending (PropSendingUntil): the mover
//     leaves it alone until then;
//  2. send Envelope(it) — it carries a fresh token and the row's ETag, so a
//     worker that receives it before the row is marked finds the row
//     exactly as written (Current) and runs it;
//  3. record the run queued with the token (the run records' Confirm), so
//     a worker's claim succeeds without reading the row (a one-off task;
//     a series' occurrence is checked against the row, as one the mover
//     sent early);
//  4. MarkSent: the row now says Sent with the token (and Confirmed, when
//     3 succeeded), as a row the mover sent early; the mover moves it at
//     its next pass without sending it again (nor confirming it again),
//     and until then a cancel, reschedule or replace through Client still
//     applies: Cancel marks the run cancelled, and Reschedule and Add with
//     Replace take the confirmation back (Options.Unconfirm), so the old
//     message is checked against the row and becomes a no-op. (A row
//     deleted by another language's client in that window is not noticed:
//     the task was due and in the queue, and may well have run already.)
//
// If the sender dies or the queue refuses between 1 and 4, the row is
// moved as any other once SendingUntil has passed: the task is late by
// that much at most and may be delivered twice (a worker's run claim
// suppresses the second run).

// NewToken returns a fresh token for a message sent ahead of the mover
// (Envelope.Token, PropSent).
func NewToken() string { return newToken() }

// Envelope returns the message of a task it as Add or Reschedule returned
// it (with its Shard, RowKey and ETag) — for a series, of its first
// occurrence, due at it.Due — carrying token: what the mover would send for
// the row, and what lets a worker check the message against the row.
func (c *Client) Envelope(it Item, token string, now time.Time) (queue.Envelope, error) {
	if it.Shard == "" || it.RowKey == "" {
		return queue.Envelope{}, fmt.Errorf("%w: %s: the item carries no row (use what Add or Reschedule returned)", ErrInvalid, it.ID)
	}
	env := queue.Envelope{
		V:              queue.EnvelopeVersion,
		ID:             it.ID,
		Type:           it.Type,
		Queue:          it.Queue,
		Priority:       it.Priority,
		FairKey:        it.FairKey,
		Payload:        it.Payload,
		PayloadBlob:    it.PayloadBlob,
		Due:            it.Due.UTC(),
		Enqueued:       now.UTC(),
		FailedAttempts: it.Attempts,
		MaxAttempts:    it.MaxAttempts,
		TraceParent:    it.TraceParent,
		UniqueKey:      it.UniqueKey,
		UniqueFor:      int64(it.UniqueFor / time.Second),
		UniqueStates:   joinStates(it.UniqueStates),
		Token:          token,
		Row:            it.Shard + "/" + it.RowKey,
		RowETag:        it.ETag,
		Batch:          it.Batch,
		After:          it.After,
		Waiters:        it.Waiters,
	}
	if it.Callback {
		env.Completed = it.Completed
	}
	if it.Recurrence != "" {
		env.ID, env.Series, env.Recurrence, env.Seq = runID(it.ID, it.Due, true), it.ID, it.Recurrence, 1
	}
	return env, nil
}

// sentProps are what MarkSent merges into the row: the token, whether its
// run was confirmed, and for a series that its first occurrence (number 1)
// is the last one sent.
func sentProps(s Sent) table.Props {
	p := table.Props{PropSent: s.Token, PropSendingUntil: "", PropConfirmed: ""}
	if s.Confirmed && s.Item.Recurrence == "" {
		p[PropConfirmed] = s.Token
	}
	if s.Item.Recurrence != "" {
		p[PropSentUntil], p[PropSeq] = formatSentUntil(s.Item.Due), int64(1)
	}
	return p
}

// MarkSent records on the row of it (as Add or Reschedule returned it)
// that its message, carrying token, is in the queue, and clears its
// SendingUntil. The write is conditional on the row being as returned: a
// row changed meanwhile (cancelled, rescheduled, replaced) is left as it
// is and MarkSent reports storage.ErrPreconditionFailed or ErrNotFound; the
// message is then a no-op for the workers.
func (c *Client) MarkSent(ctx context.Context, s Sent) error {
	it := s.Item
	if it.ETag == "" {
		return fmt.Errorf("%w: mark %s sent: the item carries no ETag", ErrInvalid, it.ID)
	}
	_, err := c.t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: it.Shard, RowKey: it.RowKey,
		Props: sentProps(s), IfMatch: it.ETag}})
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("mark %s sent: %w: %w", it.ID, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("mark %s sent: %w", it.ID, err)
	}
	return nil
}

// Sent is a task whose message was sent, for MarkSentMany.
type Sent struct {
	// Item is the task as Add, AddMany or RescheduleWith returned it.
	Item Item
	// Token is the token its message carries.
	Token string
	// Confirmed says that the run (of a one-off task) was recorded queued
	// with Token, so the mover need not confirm it.
	Confirmed bool
}

// MarkSentMany is MarkSent for many tasks, in a transaction per shard and
// 100 rows; a transaction refused because one of its rows changed is
// retried row by row. It returns an error per task (nil when marked).
func (c *Client) MarkSentMany(ctx context.Context, sent []Sent) []error {
	errs := make([]error, len(sent))
	byShard := map[string][]int{}
	for i, s := range sent {
		byShard[s.Item.Shard] = append(byShard[s.Item.Shard], i)
	}
	for _, idx := range byShard {
		for len(idx) > 0 {
			n := min(len(idx), table.MaxOps)
			chunk := idx[:n]
			idx = idx[n:]
			ops := make([]table.Op, 0, n)
			for _, i := range chunk {
				it := sent[i].Item
				ops = append(ops, table.Op{Kind: table.Merge, PartitionKey: it.Shard, RowKey: it.RowKey,
					Props: sentProps(sent[i]), IfMatch: it.ETag})
			}
			if _, err := c.t.Submit(ctx, ops); err == nil {
				continue
			}
			for _, i := range chunk {
				errs[i] = c.MarkSent(ctx, sent[i])
			}
		}
	}
	return errs
}

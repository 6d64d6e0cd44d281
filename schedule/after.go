package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Workflows. A task scheduled with After (or a batch's completion
// callback) is written waiting: its row sits at MaxTime, where no mover
// pass selects it, with the time it asked for in PropWaiting. Whoever
// learns that a parent ended calls Release for each task waiting on it;
// the last parent's Release moves the row to its due time (the time
// asked, or now) in one transaction with its index row, as Reschedule
// does. Complete does the same for a callback once its batch has ended.
// Who waits on whom is kept by the caller (the run records' dependency
// rows): this package only keeps each task's own side.

// Properties of workflow rows.
const (
	PropAfter    = "After"    // the parents' ids, comma-separated
	PropAfterAny = "AfterAny" // true: wait for the parents to end however they end
	PropMet      = "Met"      // the parents that released it, comma-separated
	// PropWaiting is the due time asked (RFC 3339) while the task waits at
	// MaxTime; absent once it is released.
	PropWaiting     = "Waiting"
	PropWaiters     = "Waiters"     // true: tasks wait for this one
	PropBatch       = "Batch"       // the batch it is a member of, or completes
	PropCallback    = "Callback"    // true: the completion callback of Batch
	PropBatchCounts = "BatchCounts" // a released callback's batch counts (JSON)
)

// MaxAfter is the most parents a task may wait for.
const MaxAfter = 100

// Verdict is what Release did.
type Verdict int

// Verdicts of Release.
const (
	// Unchanged: the task does not wait for that parent (any more).
	Unchanged Verdict = iota
	// Noted: the parent is met; the task still waits for others.
	Noted
	// Released: every parent is met; the task is due.
	Released
	// Doomed: the parent ended without succeeding and the task waits only
	// for successes: the caller cancels it (and what waits on it).
	Doomed
)

// joinIDs and splitIDs store id lists in one property.
func joinIDs(ids []string) string { return strings.Join(ids, ",") }

func splitIDs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// ParentIDs returns ids as a task's After keeps them: trimmed, without
// empty entries or repeats, in their order.
func ParentIDs(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Unmet returns the parents of it (After) that have not released it (Met).
func (it Item) Unmet() []string {
	var out []string
	for _, p := range it.After {
		if !slices.Contains(it.Met, p) {
			out = append(out, p)
		}
	}
	return out
}

// prepareFlow checks and copies the workflow fields of it into out (as
// prepare returns it): a callback, and a task with After of which some
// are not Met yet, is written waiting.
func prepareFlow(it Item, out *Item) error {
	out.AfterAny, out.Batch, out.Callback, out.Waiters = it.AfterAny, it.Batch, it.Callback, it.Waiters
	for _, p := range ParentIDs(it.After) {
		if err := ValidateID(p); err != nil {
			return fmt.Errorf("%s: parent: %w", out.label(), err)
		}
		if p == out.ID {
			return fmt.Errorf("%w: %s cannot wait for itself", ErrInvalid, out.label())
		}
		out.After = append(out.After, p)
	}
	switch {
	case len(out.After) > MaxAfter:
		return fmt.Errorf("%w: %s waits for %d tasks; the limit is %d (use a batch with a completion callback to wait for more)", ErrInvalid, out.label(), len(out.After), MaxAfter)
	case it.AfterAny && len(out.After) == 0:
		return fmt.Errorf("%w: %s: after-any without any task to wait for", ErrInvalid, out.label())
	case it.Callback && it.Batch == "":
		return fmt.Errorf("%w: %s: a completion callback needs its batch", ErrInvalid, out.label())
	case (len(out.After) > 0 || it.Callback) && out.Recurrence != "":
		return fmt.Errorf("%w: %s: a recurring series cannot wait for other tasks or a batch; schedule a one-off task", ErrInvalid, out.label())
	}
	for _, m := range it.Met {
		if slices.Contains(out.After, m) && !slices.Contains(out.Met, m) {
			out.Met = append(out.Met, m)
		}
	}
	out.Waiting = it.Callback || len(out.Unmet()) > 0
	return nil
}

// flowProps adds the workflow properties of it to p.
func flowProps(it Item, p map[string]any) {
	if len(it.After) > 0 {
		p[PropAfter] = joinIDs(it.After)
	}
	if len(it.Met) > 0 {
		p[PropMet] = joinIDs(it.Met)
	}
	if it.AfterAny {
		p[PropAfterAny] = true
	}
	if it.Waiting {
		p[PropWaiting] = it.Due.UTC().Format(time.RFC3339Nano)
	}
	if it.Waiters {
		p[PropWaiters] = true
	}
	if it.Batch != "" {
		p[PropBatch] = it.Batch
	}
	if it.Callback {
		p[PropCallback] = true
	}
}

// readFlow reads the workflow properties of e into it. What cannot be
// read is left out: a waiting row stays where it is either way.
func readFlow(e table.Entity, it *Item) {
	p := e.Props
	it.After, it.Met = splitIDs(p.Str(PropAfter)), splitIDs(p.Str(PropMet))
	it.AfterAny, it.Waiters, it.Callback = p.Bool(PropAfterAny), p.Bool(PropWaiters), p.Bool(PropCallback)
	it.Batch = p.Str(PropBatch)
	if s := p.Str(PropWaiting); s != "" {
		it.Waiting = true
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			it.Due = t.UTC()
		}
	}
	if s := p.Str(PropBatchCounts); s != "" {
		var bc leasecrontype.BatchCounts
		if json.Unmarshal([]byte(s), &bc) == nil {
			it.Completed = &bc
		}
	}
}

// keepFlow carries over to props, the row that replaces old, and to it
// what others rely on: that tasks wait for it (its message must say so)
// and the batch it is a member of (its end must be counted there), unless
// the new row names a batch itself.
func keepFlow(props map[string]any, old table.Entity, it *Item) {
	if old.Props == nil {
		return
	}
	if old.Props.Bool(PropWaiters) {
		props[PropWaiters], it.Waiters = true, true
	}
	if b := old.Props.Str(PropBatch); b != "" && it.Batch == "" && !old.Props.Bool(PropCallback) {
		props[PropBatch], it.Batch = b, b
	}
	if h := old.Props.Str(PropCancelling); h != "" {
		// A cancel holds the replaced row while it tells what waits for
		// the task: the replacement, which takes its place for them, is
		// held as well until the cancel, tried on it, removes it.
		props[PropCancelling] = h
		it.CancellingUntil = readItem(old).CancellingUntil
	}
}

// rowDue is the due time of it's row: MaxTime while it waits.
func rowDue(it Item) time.Time {
	if it.Waiting {
		return MaxTime
	}
	return it.Due
}

// Release tells the task id that its parent ended (succeeded or not): the
// parent is met when it succeeded or the task waits for any end, and the
// last parent met makes the task due at the time it asked for or now,
// whichever is later. sending, when set and the task becomes due by
// sendBy, marks it as sent by the caller (AddOptions.Sending). A task that
// is gone wraps ErrNotFound; a failed parent of a task waiting for
// successes is Doomed, and nothing is written.
func (c *Client) Release(ctx context.Context, id, parent string, succeeded bool, sending, sendBy time.Time) (Item, Verdict, error) {
	verdict := Unchanged
	it, err := c.changeWaiting(ctx, id, func(it Item, props table.Props) (time.Time, bool) {
		verdict = Unchanged
		if !it.Waiting || it.Callback || !slices.Contains(it.After, parent) || slices.Contains(it.Met, parent) {
			return time.Time{}, false
		}
		if !succeeded && !it.AfterAny {
			verdict = Doomed
			return time.Time{}, false
		}
		it.Met = append(slices.Clone(it.Met), parent)
		props[PropMet] = joinIDs(it.Met)
		if len(it.Unmet()) > 0 && !mutate.On(mutate.AfterFirstParent) || mutate.On(mutate.NoRelease) {
			verdict = Noted
			return MaxTime, true
		}
		verdict = Released
		return c.releaseAt(it, props, sending, sendBy), true
	})
	return it, verdict, err
}

// Complete releases the completion callback id of a batch that has ended,
// with the batch's counts (the handler's Task.Completed). It reports
// whether this call released it: false when it was released before.
func (c *Client) Complete(ctx context.Context, id string, counts leasecrontype.BatchCounts, sending, sendBy time.Time) (Item, bool, error) {
	released := false
	it, err := c.changeWaiting(ctx, id, func(it Item, props table.Props) (time.Time, bool) {
		released = it.Waiting && it.Callback
		if !released {
			return time.Time{}, false
		}
		b, _ := json.Marshal(counts)
		props[PropBatchCounts] = string(b)
		return c.releaseAt(it, props, sending, sendBy), true
	})
	return it, released, err
}

// releaseAt drops the waiting mark from props and returns the due time of
// a released task: the time it asked for, or now.
func (c *Client) releaseAt(it Item, props table.Props, sending, sendBy time.Time) time.Time {
	due := FromTicks(Ticks(c.opts.Clock.Now()))
	if it.Due.After(due) {
		due = it.Due
	}
	props.Delete(PropWaiting)
	props.Delete(PropSendingUntil)
	if c.opts.Clock.Now().Before(it.CancellingUntil) {
		// A cancel holds the row (it tells the task's own batch and
		// dependents that it was cancelled): the row stays the mover's,
		// which leaves it to the cancel, not sent now by the releaser.
		return due
	}
	if !sending.IsZero() && !due.After(sendBy) {
		props[PropSendingUntil] = sending.UTC().Format(time.RFC3339Nano)
	}
	return due
}

// changeWaiting rewrites the row of id as decide says from the item and a
// copy of its properties: a new due time (MaxTime: it stays in place) and
// whether to write at all. Conflicts are retried from a fresh read.
func (c *Client) changeWaiting(ctx context.Context, id string, decide func(it Item, props table.Props) (time.Time, bool)) (Item, error) {
	return c.moveRow(ctx, id, "release", "released", func(row table.Entity) (time.Time, table.Props, error) {
		props := table.Props(row.Props).Clone()
		due, write := decide(readItem(row), props)
		if !write {
			return time.Time{}, nil, nil
		}
		return due, props, nil
	})
}

// NoteWaiters marks the pending task id as one that others wait for, so
// its message carries queue.Envelope.Waiters. It reports false when that
// cannot work: the task is not pending (gone, or already in the queue:
// sent early or by its client), so its end must be watched for otherwise.
// seen is the task as a lookup just returned it (its row and ETag), which
// saves reading it again; a zero Item reads it.
func (c *Client) NoteWaiters(ctx context.Context, id string, seen Item) (bool, error) {
	ok, _, err := c.NoteWaitersFound(ctx, id, seen)
	return ok, err
}

// NoteWaitersFound is NoteWaiters that also returns the row when it found
// the task marked already, by someone else (a zero Item when this call
// wrote the mark, or marked nothing). Such a row's message may be in the
// queue already — the mover sends a row before it removes it — and its
// run may even have ended and told those that waited for it then, before
// the caller's dependency was written: the caller looks at that run
// (leasecron's Schedule does).
func (c *Client) NoteWaitersFound(ctx context.Context, id string, seen Item) (bool, Item, error) {
	now := c.opts.Clock.Now()
	var lastErr error
	for try := range retries {
		f := found{row: table.Entity{PartitionKey: seen.Shard, RowKey: seen.RowKey, ETag: seen.ETag}}
		it := seen
		if try > 0 || seen.ETag == "" || seen.ID != id {
			var err error
			f, _, err = c.locate(ctx, id)
			if errors.Is(err, ErrNotFound) {
				return false, Item{}, nil
			}
			if err != nil {
				return false, Item{}, err
			}
			it = readItem(f.row)
		}
		switch {
		case it.Sent || now.Before(it.SendingUntil):
			return false, Item{}, nil
		case it.Waiters && try == 0 && seen.ETag != "" && seen.ID == id:
			// Marked when seen, but the row may have gone since: a cancel
			// that told the waiting tasks before this one's dependency
			// was written would never tell it. Read it again (a review
			// of issue 38's fixes).
			continue
		case it.Waiters:
			return true, it, nil
		}
		_, err := c.t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: f.row.PartitionKey, RowKey: f.row.RowKey, Props: table.Props{PropWaiters: true}, IfMatch: f.row.ETag}})
		if err == nil {
			return true, Item{}, nil
		}
		if !conflict(err) {
			return false, Item{}, fmt.Errorf("mark %s as waited for: %w", id, err)
		}
		lastErr = err
	}
	return false, Item{}, fmt.Errorf("mark %s as waited for: still conflicting after %d attempts: %w", id, retries, lastErr)
}

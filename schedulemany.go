package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/schedule"
)

// ScheduleManyOptions modify ScheduleMany.
type ScheduleManyOptions struct {
	// Partial schedules every item that can be scheduled and reports the
	// others. Without it nothing is scheduled unless everything can be.
	// Items that wait for others (Item.After) need all or nothing.
	Partial bool
	// Batch makes the items one batch with this id (a new id when it is
	// empty and OnComplete is set): each item's Batch says so, and
	// Client.Batch shows how many members have ended and how.
	Batch string
	// OnComplete is the batch's completion callback: a task that waits
	// until every member has ended (succeeded, dead or cancelled) and then
	// runs once, its handler given the batch id and the counts of each
	// outcome (Task.Batch, Task.Completed). Its Due is a lower bound.
	OnComplete *Item
	// Unique, when set, has one entry per item: an item whose entry is not
	// nil is created only if no other task of its type holds the key, as
	// with ScheduleOptions.Unique. Such items are checked with the others
	// and written after them, each in its own transaction (the key's guard
	// row with the task's rows), so the all-or-nothing of a batch without
	// Partial covers the others; a held key is reported with an Err
	// wrapping ErrDuplicate (a *DuplicateError) and the holder's id in Item.
	Unique []*Unique
}

// ScheduleResult is what became of one item given to ScheduleMany.
type ScheduleResult struct {
	// Item is the item as stored (with its generated id), or as given when
	// it was refused.
	Item Item
	// Err is nil when the item was scheduled. Otherwise it wraps
	// schedule.ErrInvalid (refused by validation, or an id twice in the
	// batch), ErrAlreadyScheduled (the id is pending), schedule.ErrNotWritten
	// (not written because another item was refused, or a storage call
	// failed) or schedule.ErrMovedBeforeRollback (see ScheduleMany).
	Err error
}

// ScheduleMany schedules items in table transactions of up to 100 rows of
// one shard: about two transactions per 100 tasks instead of one per task
// (run records start when a task is sent, so they add nothing here). The
// one-off tasks due within ClientOptions.SendWithin are then sent at once,
// as Schedule sends them: a message each, their runs recorded queued in a
// transaction per partition and 33 runs, and a mark on each row. It
// returns a result per item, in order, and an error wrapping
// schedule.ErrNotWritten when any item was not scheduled.
//
// Every item is validated before anything is written. Without o.Partial,
// the batch is all or nothing: one invalid item, an id that is already
// pending or a failed write, and whatever was written is taken back. The
// one thing that cannot be taken back is a task that came due and was
// moved to the queue in the moment between its write and the undo; such an
// item is reported with schedule.ErrMovedBeforeRollback and, with run
// records, its run is recorded cancelled so that workers acknowledge it
// without running it (a recurring series is stopped). A task the mover
// had sent but not yet removed when the undo deleted its row is reported
// not written and may run once (README, "Nothing half-applied"). With
// o.Partial, the items that can be scheduled are.
// ScheduleMany never replaces a pending task.
func (c *Client) ScheduleMany(ctx context.Context, items []Item, o ScheduleManyOptions) ([]ScheduleResult, error) {
	if o.Batch != "" || o.OnComplete != nil || slices.ContainsFunc(items, func(it Item) bool { return len(it.After) > 0 }) {
		return c.scheduleManyFlow(ctx, items, o)
	}
	return c.scheduleMany(ctx, items, o)
}

// scheduleMany is ScheduleMany of items that are not a batch and wait for
// nothing.
func (c *Client) scheduleMany(ctx context.Context, items []Item, o ScheduleManyOptions) ([]ScheduleResult, error) {
	if len(o.Unique) > 0 {
		return c.scheduleManyUnique(ctx, items, o)
	}
	now := c.o.Clock.Now()
	ao := schedule.AddManyOptions{Partial: o.Partial}
	if c.runs != nil {
		ao.WaitedFor, ao.TookBack = c.watchTakenBack, c.tellTakenBack
	}
	if c.sendsNow(Item{Due: now}, now) {
		due := 0
		for _, it := range items {
			if !it.Due.After(now.Add(c.o.SendWithin)) {
				due++
			}
		}
		if n := c.takeSends(ctx, due); n > 0 {
			ao.Sending, ao.SendDueBy, ao.SendLimit = now.Add(sendGrace), now.Add(c.o.SendWithin), n
		}
	}
	res, err := c.sched.AddMany(ctx, items, ao)
	if res == nil {
		return nil, err // refused whole before any item was tried
	}
	c.sendMany(ctx, res)
	out := make([]ScheduleResult, len(res))
	for i, r := range res {
		out[i] = ScheduleResult{Item: r.Item, Err: r.Err}
		if c.runs == nil || !errors.Is(r.Err, schedule.ErrMovedBeforeRollback) || r.Item.Recurrence != "" {
			continue
		}
		// Sent before it could be taken back: a cancelled record makes
		// the worker that receives it acknowledge it without running.
		unfinished, cerr := c.runs.CancelPending(ctx, r.Item.ID, runs.Meta{Type: r.Item.Type, Due: r.Item.Due})
		if cerr != nil {
			c.o.Logger.Warn("run of a rolled-back task not marked cancelled", "task_id", r.Item.ID, "err", cerr)
		}
		if unfinished.OfDue(r.Item.Due) {
			// Its own run (the rolled-back task's batch and children hear
			// of it); an earlier scheduling's is not this call's to tell.
			c.cancelledFlow(ctx, unfinished)
		}
	}
	return out, err
}

// watchTakenBack is schedule.AddManyOptions.WaitedFor: before a
// roll-back takes back a row that tasks began waiting for while the call
// was under way, the traffic cop watches its id, and tells them it ended
// cancelled once the row is gone and no run record says otherwise (endOf)
// — or how it ended, when the row stays and runs. Nothing else would: the
// row's message is never sent (issue 38, row 197).
func (c *Client) watchTakenBack(ctx context.Context, it Item) error {
	return c.runs.WatchParents(ctx, []string{it.ID})
}

// tellTakenBack is schedule.AddManyOptions.TookBack: it tells the tasks
// that began waiting for it, a row the roll-back has just taken back
// (its id index row still holding the id), that it ended cancelled, as a
// cancel of the row would: at once, and whatever an older run record of
// the id says — the traffic cop's watch (watchTakenBack) reads the
// record's state when there is one (the id scheduled again after an
// earlier run ended), which is that run's, not the row's. A telling that
// fails is left to that watch.
func (c *Client) tellTakenBack(ctx context.Context, it Item) {
	if err := c.parentEnded(ctx, it.ID, RunCancelled); err != nil {
		c.o.Logger.Warn("telling the tasks waiting for a rolled-back task failed; the traffic cop watches it and tells them", "task_id", it.ID, "err", err)
	}
}

// sendMany sends the messages of the written items marked as being sent
// (schedule.AddManyOptions.Sending).
func (c *Client) sendMany(ctx context.Context, res []schedule.AddResult) {
	var due []Item
	for _, r := range res {
		if r.Err == nil && !r.Item.SendingUntil.IsZero() {
			due = append(due, r.Item)
		}
	}
	if len(due) > 0 {
		c.sendAll(ctx, due)
	}
}

// scheduleManyUnique is ScheduleMany with unique items: the others go as a
// batch, then each unique item on its own.
func (c *Client) scheduleManyUnique(ctx context.Context, items []Item, o ScheduleManyOptions) ([]ScheduleResult, error) {
	if len(o.Unique) != len(items) {
		return nil, fmt.Errorf("%w: ScheduleManyOptions.Unique has %d entries for %d items; give one per item (nil for an item without a key)", ErrInvalidTask, len(o.Unique), len(items))
	}
	out := make([]ScheduleResult, len(items))
	var plain []Item
	var plainAt, uniqueAt []int
	refused := false
	for i, it := range items {
		out[i].Item = it
		if o.Unique[i] == nil {
			plain, plainAt = append(plain, it), append(plainAt, i)
			continue
		}
		uniqueAt = append(uniqueAt, i)
		if err := cmp.Or(c.sched.CheckUnique(it, *o.Unique[i]), c.checkUniqueWindow(*o.Unique[i])); err != nil {
			out[i].Err, refused = err, true
		}
	}
	notWritten := func(at []int) {
		for _, i := range at {
			if out[i].Err == nil {
				out[i].Err = fmt.Errorf("%w: another item of the batch was refused", schedule.ErrNotWritten)
			}
		}
	}
	if refused && !o.Partial {
		notWritten(plainAt)
		notWritten(uniqueAt)
		return out, fmt.Errorf("%w: a unique item was refused", schedule.ErrNotWritten)
	}
	var batchErr error
	if len(plain) > 0 {
		res, err := c.ScheduleMany(ctx, plain, ScheduleManyOptions{Partial: o.Partial})
		for j, r := range res {
			out[plainAt[j]] = r
		}
		if err != nil && !o.Partial {
			notWritten(uniqueAt)
			return out, err
		}
		batchErr = err
	}
	for _, i := range uniqueAt {
		if out[i].Err != nil {
			continue
		}
		it, err := c.Schedule(ctx, items[i], &ScheduleOptions{Unique: o.Unique[i]})
		out[i] = ScheduleResult{Item: it, Err: err}
		if err != nil && !errors.Is(err, ErrDuplicate) && batchErr == nil {
			batchErr = fmt.Errorf("%w: %w", schedule.ErrNotWritten, err)
		}
	}
	return out, batchErr
}

package leasecron

import (
	"context"
	"errors"
	"sync"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/schedule"
)

// ScheduleManyOptions modify ScheduleMany.
type ScheduleManyOptions struct {
	// Partial schedules every item that can be scheduled and reports the
	// others. Without it nothing is scheduled unless everything can be.
	Partial bool
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

// markConcurrency bounds the concurrent run-record writes of ScheduleMany.
const markConcurrency = 16

// ScheduleMany schedules items in table transactions of up to 100 rows of
// one shard: about two transactions per 100 tasks instead of one per task
// (with run records, each one-off task adds its "scheduled" record, one
// request each). It returns a result per item, in order, and an error
// wrapping schedule.ErrNotWritten when any item was not scheduled.
//
// Every item is validated before anything is written. Without o.Partial,
// the batch is all or nothing: one invalid item, an id that is already
// pending or a failed write, and whatever was written is taken back. The
// one thing that cannot be taken back is a task that came due and was
// moved to the queue in the moment between its write and the undo; such an
// item is reported with schedule.ErrMovedBeforeRollback and, with run
// records, its run is cancelled so that workers acknowledge it without
// running it. With o.Partial, the items that can be scheduled are.
// ScheduleMany never replaces a pending task.
func (c *Client) ScheduleMany(ctx context.Context, items []Item, o ScheduleManyOptions) ([]ScheduleResult, error) {
	res, err := c.sched.AddMany(ctx, items, schedule.AddManyOptions{Partial: o.Partial})
	out := make([]ScheduleResult, len(res))
	for i, r := range res {
		out[i] = ScheduleResult{Item: r.Item, Err: r.Err}
	}
	if c.runs == nil {
		return out, err
	}
	sem := make(chan struct{}, markConcurrency)
	var wg sync.WaitGroup
	for _, r := range res {
		it := r.Item
		var mark func() error
		switch {
		case r.Err == nil && it.Recurrence == "":
			mark = func() error { return c.runs.MarkScheduled(ctx, it.ID, runs.Meta{Type: it.Type, Due: it.Due}) }
		case errors.Is(r.Err, schedule.ErrMovedBeforeRollback):
			// Recorded first, so that the cancel holds even if the mover
			// has not recorded the run yet.
			mark = func() error {
				if err := c.runs.MarkScheduled(ctx, it.ID, runs.Meta{Type: it.Type, Due: it.Due}); err != nil {
					return err
				}
				_, err := c.runs.Cancel(ctx, it.ID)
				return err
			}
		default:
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := mark(); err != nil && !errors.Is(err, runs.ErrAlreadyFinished) {
				c.o.Logger.Warn("run record not written", "task_id", it.ID, "err", err)
			}
		}()
	}
	wg.Wait()
	return out, err
}

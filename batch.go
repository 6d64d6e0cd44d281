package leasecron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/failpoint"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

// Batches. ScheduleMany with a batch writes, in this order: the batch's
// header (Runs table, partition "~c{batch}": members expected, the
// callback's id), the callback's row waiting at the end of time, the
// members (each row saying its batch, so its message does), the member
// list, and then it seals the batch with the number of members written.
// The end of each member is counted once (a row per member inserted in
// the transaction that counts it); whoever counts the end that completes
// a sealed batch releases the callback, conditionally on its row, so it is
// released once, with the counts. A worker that dies anywhere in between
// leaves the member's message to reappear and do it again.

// BatchCounts are how a batch's members ended (leasecrontype.BatchCounts).
type BatchCounts = leasecrontype.BatchCounts

// BatchStatus is a batch's progress (Client.Batch).
type BatchStatus struct {
	// ID is the batch's id.
	ID string `json:"id"`
	// Counts: members in all, and how many have ended each way.
	Counts BatchCounts `json:"counts"`
	// Pending is the number of members that have not ended.
	Pending int `json:"pending"`
	// Sealed reports that every member was written. A batch whose
	// scheduler died midway is never sealed and never completes.
	Sealed bool `json:"sealed"`
	// Complete reports that every member has ended.
	Complete bool `json:"complete"`
	// Callback is the completion callback's task id ("" without one).
	Callback string `json:"callback,omitempty"`
	// Created is when the batch was written; Finished when its last
	// member ended (zero before).
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
}

// BatchMember is a member of a batch and how it ended (State is empty
// while it has not).
type BatchMember struct {
	ID    string   `json:"id"`
	State RunState `json:"state,omitempty"`
}

// ErrNoBatch: no batch has that id (it wraps ErrNotFound).
var ErrNoBatch = fmt.Errorf("%w: %w", ErrNotFound, runs.ErrNoBatch)

// Batch returns the progress of batch id: one query. Batches are kept
// with the run records: without them (worker.runs: false) it fails with
// ErrNoRunRecords.
func (c *Client) Batch(ctx context.Context, id string) (BatchStatus, error) {
	if c.runs == nil {
		return BatchStatus{}, fmt.Errorf("%w: a batch is kept with the run records", ErrNoRunRecords)
	}
	b, err := c.runs.GetBatch(ctx, id)
	if errors.Is(err, runs.ErrNoBatch) {
		return BatchStatus{}, fmt.Errorf("%w: %q", ErrNoBatch, id)
	}
	if err != nil {
		return BatchStatus{}, err
	}
	return BatchStatus{ID: id, Counts: b.BatchCounts, Pending: max(0, b.Total-b.Ended()), Sealed: b.Sealed, Complete: b.Complete(),
		Callback: b.Callback, Created: b.Created, Finished: b.Finished}, nil
}

// BatchMembers lists the members of batch id in id order, with how each
// has ended: two queries per 1,000 members (and a read of the batch when
// it lists none, to tell an empty batch from an unknown one).
func (c *Client) BatchMembers(ctx context.Context, id string) ([]BatchMember, error) {
	if c.runs == nil {
		_, err := c.Batch(ctx, id)
		return nil, err
	}
	ms, err := c.runs.BatchMembers(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		if _, err := c.Batch(ctx, id); err != nil {
			return nil, err
		}
	}
	out := make([]BatchMember, len(ms))
	for i, m := range ms {
		out[i] = BatchMember{ID: m.ID, State: m.State}
	}
	return out, nil
}

// uniqueIDs names the unique tasks of a call, by id or (without one) by
// index: the first three, and how many more.
func uniqueIDs(items []Item, unique []*Unique) string {
	var ids []string
	for i, u := range unique {
		switch {
		case u == nil || i >= len(items):
		case items[i].ID != "":
			ids = append(ids, items[i].ID)
		default:
			ids = append(ids, fmt.Sprintf("task %d", i))
		}
	}
	if len(ids) > 3 {
		return strings.Join(ids[:3], ", ") + fmt.Sprintf(" and %d more", len(ids)-3)
	}
	return strings.Join(ids, ", ")
}

// scheduleManyFlow is ScheduleMany of a batch, or of items that wait for
// others (in the same call or already scheduled).
func (c *Client) scheduleManyFlow(ctx context.Context, items []Item, o ScheduleManyOptions) ([]ScheduleResult, error) {
	if c.runs == nil {
		return nil, fmt.Errorf("%w: batches and tasks that wait for others need run records (runs are off)", ErrInvalidTask)
	}
	after := slices.ContainsFunc(items, func(it Item) bool { return len(it.After) > 0 })
	switch {
	case len(o.Unique) > 0:
		why := "a batch"
		if o.Batch == "" && o.OnComplete == nil {
			why = "tasks that wait for others"
		}
		return nil, fmt.Errorf("%w: unique tasks (%s) cannot be scheduled in one call with %s: schedule them in a call of their own", ErrInvalidTask, uniqueIDs(items, o.Unique), why)
	case after && o.Partial:
		return nil, fmt.Errorf("%w: tasks that wait for others are scheduled all or nothing (Partial is off)", ErrInvalidTask)
	}
	now := c.o.Clock.Now()
	items = slices.Clone(items)
	inCall := make(map[string]int, len(items))
	for i := range items {
		if items[i].ID == "" {
			items[i].ID = schedule.NewID(now)
		}
		items[i].After = schedule.ParentIDs(items[i].After)
		inCall[items[i].ID] = i
	}
	deps, states, err := c.planDependencies(ctx, items, inCall)
	if err != nil {
		return nil, err
	}
	var ob openedBatch
	if o.Batch != "" || o.OnComplete != nil {
		if ob, err = c.openBatch(ctx, items, o); err != nil {
			return nil, err
		}
	}
	batch := ob.id
	since := c.o.Clock.Now()
	if err := c.runs.AddDependents(ctx, deps); err != nil {
		return nil, errors.Join(err, c.abandonBatch(ctx, ob))
	}
	noted, err := c.noteParents(ctx, deps, states)
	if err != nil {
		c.dropDependents(ctx, deps)
		return nil, errors.Join(err, c.abandonBatch(ctx, ob))
	}
	res, err := c.scheduleMany(ctx, items, ScheduleManyOptions{Partial: o.Partial})
	var written []string
	for _, r := range res {
		if r.Err == nil {
			written = append(written, r.Item.ID)
		}
	}
	if len(written) == 0 && len(items) > 0 {
		c.dropDependents(ctx, deps)
		return res, errors.Join(err, c.abandonBatch(ctx, ob))
	}
	c.lookAgain(ctx, deps, states, noted, since, false)
	if batch != "" {
		// The tasks are written: a fault that passes is tried again, and
		// one that does not is not an answer a caller should retry (the
		// batch exists now, and its retry would be refused), nor one it
		// may overlook (unsealed, the batch never releases its callback).
		// The caller may have gone meanwhile (a client that timed out):
		// the seal is made all the same.
		sctx, cancel := settleContext(ctx)
		serr := retry.Transient(sctx, retry.Policy{Clock: c.o.Clock}, func(ctx context.Context) error { return c.sealBatch(ctx, batch, written) })
		cancel()
		if serr != nil {
			return res, errors.Join(err, fmt.Errorf("%w: the tasks were written, but sealing or completing batch %s failed (leasecron batch %s shows whether it is sealed; unsealed, its callback never runs): %w", ErrIncomplete, batch, batch, serr))
		}
	}
	return res, err
}

// planDependencies checks the parents of every item (in this call, or
// pending, or ended), refuses cycles within the call, marks the items
// others in the call wait for, notes the parents already met, and returns
// the dependencies to write and what was found of the parents outside the
// call.
func (c *Client) planDependencies(ctx context.Context, items []Item, inCall map[string]int) ([]runs.Dependent, map[string]parentState, error) {
	var outside []string
	for _, it := range items {
		for _, p := range it.After {
			if _, ok := inCall[p]; !ok && !slices.Contains(outside, p) {
				outside = append(outside, p)
			}
		}
	}
	states := map[string]parentState{}
	if len(outside) > 0 {
		var err error
		first := ""
		for _, it := range items {
			if len(it.After) > 0 {
				first = it.ID
				break
			}
		}
		if states, err = c.parentsOf(ctx, first, outside); err != nil {
			return nil, nil, err
		}
	}
	if err := cycleInCall(items, inCall); err != nil {
		return nil, nil, err
	}
	var deps []runs.Dependent
	for i := range items {
		it := &items[i]
		met, err := refuseEnded(*it, states)
		if err != nil {
			return nil, nil, err
		}
		it.Met = met
		for _, p := range it.After {
			if j, ok := inCall[p]; ok {
				items[j].Waiters = true
			}
		}
		deps = append(deps, dependents(*it)...)
	}
	return deps, states, nil
}

// cycleInCall refuses items that wait for one another in a cycle
// (removing, again and again, the items nothing in the call waits for
// leaves the cycles).
func cycleInCall(items []Item, inCall map[string]int) error {
	waiting := make([]int, len(items)) // parents in the call not yet removed
	children := make([][]int, len(items))
	for i, it := range items {
		for _, p := range it.After {
			if j, ok := inCall[p]; ok {
				waiting[i]++
				children[j] = append(children[j], i)
			}
		}
	}
	var free []int
	for i, n := range waiting {
		if n == 0 {
			free = append(free, i)
		}
	}
	left := len(items)
	for len(free) > 0 {
		i := free[len(free)-1]
		free = free[:len(free)-1]
		left--
		for _, k := range children[i] {
			if waiting[k]--; waiting[k] == 0 {
				free = append(free, k)
			}
		}
	}
	if left == 0 {
		return nil
	}
	var in []string
	for i, n := range waiting {
		if n > 0 {
			in = append(in, items[i].ID)
		}
	}
	return fmt.Errorf("%w: tasks %s wait for one another in a cycle", ErrInvalidTask, joinShort(in, 10))
}

// joinShort joins ids, the first n of them.
func joinShort(ids []string, n int) string {
	if len(ids) <= n {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("%v and %d more", ids[:n], len(ids)-n)
}

// openedBatch is the batch a ScheduleMany wrote: its id, when its header
// was written (which names it as this call's), and its callback (no ID:
// none).
type openedBatch struct {
	id      string
	created time.Time
	cb      Item
}

// openBatch validates the batch of o, writes its header and its callback
// (waiting), and marks the items as its members.
func (c *Client) openBatch(ctx context.Context, items []Item, o ScheduleManyOptions) (openedBatch, error) {
	now := c.o.Clock.Now()
	id := o.Batch
	if id == "" {
		id = schedule.NewID(now)
	}
	if err := schedule.ValidateID(id); err != nil {
		return openedBatch{}, fmt.Errorf("batch id: %w", err)
	}
	var cb Item
	if o.OnComplete != nil {
		cb = *o.OnComplete
		if cb.ID == "" {
			cb.ID = id + "-done"
		}
		if cb.Due.IsZero() {
			cb.Due = now
		}
		if len(cb.After) > 0 {
			return openedBatch{}, fmt.Errorf("%w: a completion callback waits for its batch, not for other tasks", ErrInvalidTask)
		}
		cb.Batch, cb.Callback = id, true
		if _, err := c.sched.Check(cb); err != nil {
			return openedBatch{}, fmt.Errorf("completion callback: %w", err)
		}
	}
	for i := range items {
		items[i].Batch = id
		if items[i].ID == cb.ID {
			return openedBatch{}, fmt.Errorf("%w: the completion callback's id %s is also a member's", ErrInvalidTask, cb.ID)
		}
	}
	created, err := c.runs.CreateBatch(ctx, id, len(items), cb.ID)
	ob := openedBatch{id: id, created: created}
	switch {
	case errors.Is(err, storage.ErrAlreadyExists):
		return openedBatch{}, fmt.Errorf("%w: %s", ErrBatchExists, id)
	case err != nil && storage.IsTransient(err):
		// The header's write may have committed unanswered: taken back
		// if it did, so that the call may be sent again.
		return openedBatch{}, errors.Join(err, c.abandonBatch(ctx, ob))
	case err != nil:
		return openedBatch{}, err
	}
	if cb.ID != "" {
		ob.cb = cb
		written, err := c.sched.Add(ctx, cb, schedule.AddOptions{})
		if err != nil {
			// (Its write may have committed unanswered: abandonBatch
			// takes back a callback row that is this call's.)
			return openedBatch{}, errors.Join(fmt.Errorf("completion callback: %w", err), c.abandonBatch(ctx, ob))
		}
		ob.cb = written
	}
	return ob, nil
}

// settleTimeout bounds what a ScheduleMany of a batch does to settle it
// once its header is written — seal it, or take it back — when its caller
// has gone (a client that timed out, a request cancelled): left half
// done, a batch either never releases its callback or keeps its id taken
// with no members, and the caller's retry is refused as a batch that
// already exists.
const settleTimeout = 2 * time.Minute

// settleContext is ctx without its cancellation, bounded by settleTimeout.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// abandonBatch takes back a batch none of whose members was written: its
// callback's row, when it is this call's (the callback of this batch, due
// when this call made it due: its write may have committed unanswered),
// and its header, when it is this call's (written at b.created: another
// call of the same batch id — a retry of this one, answered meanwhile —
// may have written its own since). A fault that passes is tried again,
// and the caller's cancellation does not stop it (its retry would meet
// the header). A batch that cannot be taken back is an ErrIncomplete: its
// id stays taken, which a retry of the call cannot mend, so the error
// says so instead of one worth retrying.
func (c *Client) abandonBatch(ctx context.Context, b openedBatch) error {
	if b.id == "" {
		return nil
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	batch, cb := b.id, b.cb
	err := retry.Transient(ctx, retry.Policy{Clock: c.o.Clock}, func(ctx context.Context) error {
		if cb.ID != "" {
			switch have, err := c.sched.Get(ctx, cb.ID); {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return err
			case have.Batch == batch && have.Callback && have.Due.Equal(schedule.FromTicks(schedule.Ticks(cb.Due))):
				// (Due as the table keeps it, to the 100 ns tick.)
				if _, err := c.sched.Cancel(ctx, cb.ID); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			}
		}
		return c.runs.DeleteBatch(ctx, batch, b.created)
	})
	if err != nil {
		c.o.Logger.Warn("taking back a batch none of whose tasks was written failed", "batch", batch, "err", err)
		return fmt.Errorf("%w: none of the tasks was written, but batch %s could not be taken back and its id stays taken (leasecron batch %s shows it): %w", ErrIncomplete, batch, batch, err)
	}
	return nil
}

// sealBatch lists the members written, seals the batch with their number
// and completes it if they have all ended already.
func (c *Client) sealBatch(ctx context.Context, batch string, written []string) error {
	if err := c.runs.AddBatchMembers(ctx, batch, written); err != nil {
		return err
	}
	if err := c.runs.SealBatch(ctx, batch, len(written)); err != nil {
		return err
	}
	b, err := c.runs.GetBatch(ctx, batch)
	if err != nil || !b.Complete() {
		return err
	}
	return c.completeBatch(ctx, b)
}

// memberEnded counts the end of member (in st) in batch, and completes
// the batch when that was its last member.
func (c *Client) memberEnded(ctx context.Context, batch, member string, st RunState) error {
	b, err := c.runs.EndMember(ctx, batch, member, st)
	if errors.Is(err, runs.ErrNoBatch) {
		c.o.Logger.Warn("a task names a batch that does not exist; its end is not counted", "task_id", member, "batch", batch)
		return nil
	}
	if err != nil || !b.Complete() {
		return err
	}
	failpoint.Hit("batch-complete")
	return c.completeBatch(ctx, b)
}

// completeBatch releases the callback of the complete batch b (once: a
// callback released before is left alone) and notes when it finished.
func (c *Client) completeBatch(ctx context.Context, b runs.Batch) error {
	if b.Callback != "" {
		sending, sendBy := c.sendWindow(ctx)
		it, released, err := c.sched.Complete(ctx, b.Callback, b.BatchCounts, sending, sendBy)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("release the completion callback %s of batch %s: %w", b.Callback, b.ID, err)
		}
		if released {
			c.o.Logger.Info("batch complete; its callback is due", "batch", b.ID, "task_id", it.ID,
				"succeeded", b.Succeeded, "dead", b.Dead, "cancelled", b.Cancelled)
			if !it.SendingUntil.IsZero() {
				c.sendNow(ctx, it)
			}
			failpoint.Hit("callback-released")
		}
	}
	if b.Finished.IsZero() {
		if err := c.runs.FinishBatch(ctx, b.ID); err != nil {
			c.o.Logger.Debug("noting when a batch finished failed", "batch", b.ID, "err", err)
		}
	}
	return nil
}

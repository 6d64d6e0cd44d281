package leasecron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/failpoint"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// Tasks that wait for other tasks (Item.After). Scheduling one writes, in
// this order: a dependency row per parent it still waits for (Runs table,
// partition "~d", keyed by the parent), a mark on each pending parent
// (Waiters) so that its message says others wait for it — a parent whose
// message has already been sent is watched by the traffic cop instead
// (partition "~l") — and the task's row waiting at the end of time. Then
// it looks once more at the watched parents and at those another task
// had marked already, in case one ended in between (lookAgain).
//
// A parent's end is applied by whoever sees it first — the worker that
// recorded it, before deleting its message (queue.ConsumerOptions.OnEnd);
// the traffic cop, for watched parents; the client that cancels a pending
// parent — and every step is idempotent and ordered so that a crash
// repeats one: the child is released (the last parent) or noted, or,
// when the parent did not succeed, cancelled with what waits on it, and
// only then is the dependency row removed.

// watchEvery is the longest the traffic cop goes between looks at the
// watched parents (one query when there are none: 7,200 an hour, beside
// the 18,000 of its consumer listening for tasks due now), and so about
// the most a task waiting for a parent that was already in the queue
// starts after that parent's end.
const watchEvery = 500 * time.Millisecond

// maxWalk bounds the tasks a cycle check looks at.
const maxWalk = 1000

// parentState is what Schedule found of a parent.
type parentState struct {
	// ended is the state of a parent that has ended ("" otherwise).
	ended RunState
	// sent: its message is in the queue (or being sent) without saying
	// that others wait for it, so its end must be watched for.
	sent bool
	// pending is its row, as read, while it waits in the schedule.
	pending Item
}

// parentsOf finds each parent of child: pending (a row), in flight (a run
// record that has not ended) or ended. Unknown and recurring parents are
// refused.
func (c *Client) parentsOf(ctx context.Context, child string, parents []string) (map[string]parentState, error) {
	out := make(map[string]parentState, len(parents))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range parents {
		g.Go(func() error {
			st, err := c.parentState(gctx, child, p)
			mu.Lock()
			out[p] = st
			mu.Unlock()
			return err
		})
	}
	return out, g.Wait()
}

func (c *Client) parentState(ctx context.Context, child, p string) (parentState, error) {
	now := c.o.Clock.Now()
	it, err := c.sched.Get(ctx, p)
	switch {
	case err == nil && it.Recurrence != "":
		return parentState{}, specErr("after", acceptParents, fmt.Errorf("%w: task %s: %s is a recurring series; a task can wait only for one-off tasks", ErrInvalidTask, child, p))
	case err == nil:
		return parentState{sent: it.Sent || now.Before(it.SendingUntil), pending: it}, nil
	case !errors.Is(err, ErrNotFound):
		return parentState{}, fmt.Errorf("task %s: look up parent %s: %w", child, p, err)
	}
	r, err := c.runs.Get(ctx, p)
	switch {
	case errors.Is(err, runs.ErrExpired):
		return parentState{}, specErr("after", acceptParents, fmt.Errorf("%w: task %s: parent %s: its run record has expired, so whether it succeeded is no longer known", ErrInvalidTask, child, p))
	case errors.Is(err, runs.ErrNotFound):
		return parentState{}, specErr("after", acceptParents, fmt.Errorf("%w: task %s: unknown parent %s: no pending task or run record has that id", ErrInvalidTask, child, p))
	case err != nil:
		return parentState{}, fmt.Errorf("task %s: look up parent %s: %w", child, p, err)
	case r.EndOfID(now):
		return parentState{ended: r.State}, nil
	}
	return parentState{sent: true}, nil
}

// refuseEnded refuses a child whose parent has already ended without
// succeeding (unless it waits for any end) and returns the parents
// already met.
func refuseEnded(it Item, states map[string]parentState) ([]string, error) {
	var met []string
	for _, p := range it.After {
		switch st := states[p].ended; {
		case st == "":
		case st == RunSucceeded || it.AfterAny:
			met = append(met, p)
		default:
			return nil, specErr("after", acceptParents, fmt.Errorf("%w: task %s: parent %s has already ended %s, so the task would never run (wait with after-any to run it after any end)", ErrInvalidTask, it.ID, p, st))
		}
	}
	return met, nil
}

// checkCycle refuses to let id wait for parents when one of them already
// waits, directly or through others, for id (a task rescheduled with
// Replace; a new id has nothing waiting for it yet, and a cycle within
// one ScheduleMany is cycleInCall's).
func (c *Client) checkCycle(ctx context.Context, id string, parents []string) error {
	seen := map[string]bool{}
	path := map[string]string{} // task → the task that led to it
	queue := slices.Clone(parents)
	for _, p := range parents {
		path[p] = id
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == id {
			return specErr("after", "ids of tasks that do not wait, directly or through others, for this one", fmt.Errorf("%w: task %s cannot wait for %s: that would be a cycle (%s)", ErrInvalidTask, id, strings.Join(parents, ","), cyclePath(id, path)))
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if len(seen) > maxWalk {
			return fmt.Errorf("%w: task %s: more than %d tasks wait on one another above it; the check for a cycle stops there", ErrInvalidTask, id, maxWalk)
		}
		next, err := c.waitingOn(ctx, p)
		if err != nil {
			return err
		}
		for _, q := range next {
			if _, ok := path[q]; !ok {
				path[q] = p
			}
			queue = append(queue, q)
		}
	}
	return nil
}

// cyclePath renders the cycle through id found by checkCycle.
func cyclePath(id string, path map[string]string) string {
	out := []string{id}
	for at, n := path[id], 0; at != "" && n <= maxWalk; at, n = path[at], n+1 {
		out = append(out, at)
		if at == id {
			break
		}
	}
	slices.Reverse(out)
	return strings.Join(out, " → ")
}

// waitingOn returns the parents the pending task id still waits for.
func (c *Client) waitingOn(ctx context.Context, id string) ([]string, error) {
	it, err := c.sched.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil || !it.Waiting {
		return nil, err
	}
	return it.Unmet(), nil
}

// scheduleAfter is Schedule of a task with After.
func (c *Client) scheduleAfter(ctx context.Context, it Item, o *ScheduleOptions) (Item, error) {
	if c.runs == nil {
		return Item{}, fmt.Errorf("%w: task %s waits for other tasks, which needs run records (runs are off)", ErrInvalidTask, it.ID)
	}
	if o.Unique != nil {
		return Item{}, fmt.Errorf("%w: task %s: a unique task cannot wait for other tasks", ErrInvalidTask, it.ID)
	}
	if it.ID == "" {
		it.ID = schedule.NewID(c.o.Clock.Now())
	}
	// Validate first (nothing is read for a task the schedule refuses).
	if _, err := c.sched.Check(it); err != nil {
		return Item{}, err
	}
	it.After = schedule.ParentIDs(it.After)
	states, err := c.parentsOf(ctx, it.ID, it.After)
	if err != nil {
		return Item{}, err
	}
	if it.Met, err = refuseEnded(it, states); err != nil {
		return Item{}, err
	}
	if o.Replace {
		if err := c.checkCycle(ctx, it.ID, it.After); err != nil {
			return Item{}, err
		}
	}
	deps := dependents(it)
	since := c.o.Clock.Now()
	if err := c.runs.AddDependents(ctx, deps); err != nil {
		return Item{}, err
	}
	noted, err := c.noteParents(ctx, deps, states)
	if err != nil {
		c.dropDependents(ctx, deps)
		return Item{}, err
	}
	added, err := c.scheduleRow(ctx, it, o)
	if err != nil {
		c.dropDependents(ctx, deps)
		return added, err
	}
	c.lookAgain(ctx, deps, states, noted, since, o.Replace)
	return added, nil
}

// dependents returns the dependencies of it on the parents it waits for.
func dependents(it Item) []runs.Dependent {
	var out []runs.Dependent
	for _, p := range it.Unmet() {
		out = append(out, runs.Dependent{Parent: p, Child: it.ID})
	}
	return out
}

// scheduleRow writes it (a unique task with o.Unique), and sends it at
// once when it is due now and waits for nothing. On a fresh account Add
// creates the table and payload container. The run record starts when
// the task is sent: until then the pending row is the task's record
// (Status reads it).
func (c *Client) scheduleRow(ctx context.Context, it Item, o *ScheduleOptions) (Item, error) {
	ao := schedule.AddOptions{Replace: o.Replace}
	now := c.o.Clock.Now()
	send := !it.Due.IsZero() && len(it.Unmet()) == 0 && c.sendsNow(it, now) && c.takeSends(ctx, 1) == 1
	if send {
		ao.Sending = now.Add(sendGrace)
	}
	var added Item
	var err error
	if o.Unique != nil {
		added, err = c.scheduleUnique(ctx, it, *o.Unique, ao)
	} else {
		added, err = c.sched.Add(ctx, it, ao)
	}
	if err == nil && send && !added.SendingUntil.IsZero() {
		// (Cleared when the row taken for ours after a lost answer no
		// longer holds our SendingUntil: whoever wrote it sends it.)
		c.sendNow(ctx, added)
	}
	return added, err
}

// dropDependents removes the dependency rows of children that were not
// written (best effort: a row left behind is removed when its parent
// ends).
//
// A dependency another pending task of the child's id waits by is kept:
// scheduling an id that is already pending (a retried request, say)
// writes the same rows the pending task relies on, and dropping them
// would leave it waiting for good. (One read per child, on this failure
// path only; when the read fails the row is kept: a stray dependency
// costs less than a child that never starts.)
func (c *Client) dropDependents(ctx context.Context, deps []runs.Dependent) {
	waits := map[string]map[string]bool{} // child → parents its pending row waits for (nil: keep all)
	for _, d := range deps {
		if _, seen := waits[d.Child]; seen {
			continue
		}
		have, err := c.Get(ctx, d.Child)
		switch {
		case errors.Is(err, ErrNotFound):
			waits[d.Child] = map[string]bool{}
		case err != nil:
			waits[d.Child] = nil
		default:
			ps := map[string]bool{}
			for _, p := range have.After {
				ps[p] = true
			}
			waits[d.Child] = ps
		}
	}
	for _, d := range deps {
		if ps := waits[d.Child]; ps == nil || ps[d.Parent] {
			continue
		}
		if err := c.runs.DropDependent(ctx, d); err != nil {
			c.o.Logger.Debug("removing a dependency of a task not scheduled failed", "task_id", d.Child, "parent", d.Parent, "err", err)
		}
	}
}

// noteParents makes sure the end of every parent in deps is heard of,
// before the child's row is written (issue 38, the simulator's seed 3152:
// a client that died after writing the row, before this, left the child
// waiting for good): pending parents are marked (their messages will say
// others wait; a parent in states with no entry was written marked),
// parents already sent are watched by the traffic cop, and so are pending
// parents whose mark failed. It returns what lookAgain looks at: the
// watched parents, and the rows of the parents it found marked already
// by others; when watching fails, the error, and the child must not be
// written. A parent that ends before the child's row is there keeps
// being watched until it is (applyEnd).
func (c *Client) noteParents(ctx context.Context, deps []runs.Dependent, states map[string]parentState) (noted, error) {
	n := noted{marked: map[string]Item{}}
	for _, p := range parentsIn(deps, states) {
		if states[p].sent {
			n.watched = append(n.watched, p)
			continue
		}
		ok, found, err := c.sched.NoteWaitersFound(ctx, p, states[p].pending)
		if err != nil {
			c.o.Logger.Warn("marking a parent as waited for failed; the traffic cop watches it instead", "parent", p, "err", err)
		}
		switch {
		case !ok:
			n.watched = append(n.watched, p)
		case found.ID != "":
			n.marked[p] = found
		}
	}
	if err := c.runs.WatchParents(ctx, n.watched); err != nil {
		return noted{}, fmt.Errorf("make sure the end of parents %s is heard of: %w", strings.Join(n.watched, ","), err)
	}
	return n, nil
}

// noted is what noteParents did to make sure the parents' ends are heard
// of.
type noted struct {
	// watched are the parents the traffic cop watches.
	watched []string
	// marked are the rows of the pending parents found marked as waited
	// for already (by an earlier child): their messages may be out, their
	// ends told before this child's dependency was written.
	marked map[string]Item
}

// parentsIn returns the parents of deps that states has, in order.
func parentsIn(deps []runs.Dependent, states map[string]parentState) []string {
	var order []string
	for _, d := range deps {
		if _, ok := states[d.Parent]; ok && !slices.Contains(order, d.Parent) {
			order = append(order, d.Parent)
		}
	}
	return order
}

// lookAgain looks once more at the watched parents, once the children's
// rows are written (their dependencies written since since), and applies
// the end of one that ended meanwhile — perhaps before its dependency
// rows were there to be found. A parent marked while it was still pending
// will say so in its message, and its end will find the dependency rows
// written before the mark, and the child's row — unless the row replaced
// another (replaced), which that end found instead, or the write took
// longer than orphanGrace, after which the end dropped the dependency as
// an orphan: then every parent is looked at (a review of seed 3152's
// fix). What fails here the traffic cop does for a watched parent.
//
// A parent found marked already (by an earlier child; this one wrote no
// mark) is looked at too: the mover sends a row before it removes it, so
// its run may have ended already and told the children that waited then,
// before this one's dependency was written (issue 38, seed 32048: the
// mover's removal was slow, and the child waited for good). That costs a
// read of its run record (two when there is none), and, when the record
// says the run of the row found ended, the reads of endOf. When a look
// at it fails, the traffic cop watches it — and so it does when the
// record said the run ended but endOf then finds the parent not ended
// (its death requeued, say, between the two reads), or when the record
// says the row's run died and was requeued already: that end may have
// been told before this child's dependency was written, and what the
// parent became need not say that anyone waits.
func (c *Client) lookAgain(ctx context.Context, deps []runs.Dependent, states map[string]parentState, n noted, since time.Time, replaced bool) {
	parents := slices.Clone(n.watched)
	all := replaced || c.o.Clock.Now().Sub(since) > orphanGrace/2
	if all {
		parents = parentsIn(deps, states)
	}
	var unheard []string // marked parents whose end may not be heard of
	lost := func(p string) {
		if _, marked := n.marked[p]; marked && !slices.Contains(unheard, p) {
			unheard = append(unheard, p)
		}
	}
	ranOut := map[string]bool{} // marked parents whose row's run had ended
	for _, p := range parentsIn(deps, states) {
		row, marked := n.marked[p]
		if !marked {
			continue
		}
		r, err := c.runs.Get(ctx, p)
		switch {
		case errors.Is(err, runs.ErrNotFound):
		case err != nil:
			lost(p)
		case r.EndOfID(c.o.Clock.Now()) && recordOf(r, row.Due):
			if !all {
				parents = append(parents, p)
			}
			ranOut[p] = true
		case len(r.Requeued) > 0 && recordOf(r, row.Due):
			// Its row's run died and was requeued already: the death
			// may have been told before this child's dependency was
			// written, and the requeued run's message need not say that
			// anyone waits.
			lost(p)
		}
	}
	for _, p := range parents {
		st, ended, err := c.endOf(ctx, p)
		if err != nil || !ended && ranOut[p] {
			lost(p)
			continue
		}
		if !ended {
			continue
		}
		for _, d := range deps {
			if d.Parent != p {
				continue
			}
			if err := c.applyEnd(ctx, d, st); err != nil && !errors.Is(err, errChildNotYet) {
				c.o.Logger.Warn("applying the end of a parent that ended while its dependent was scheduled failed; the traffic cop retries", "task_id", d.Child, "parent", p, "err", err)
				lost(p)
			}
		}
	}
	if len(unheard) > 0 {
		if err := c.runs.WatchParents(ctx, unheard); err != nil {
			c.o.Logger.Error("tasks wait for a parent whose end may have been told before they began waiting, and nothing watches it", "parents", strings.Join(unheard, ","), "err", err)
		}
	}
}

// currentOrWatched is the worker's queue.ConsumerOptions.Current: it
// checks an early-sent message against its task's row
// (schedule.Client.Current). A message found stale is acknowledged without
// running; when tasks wait for its task (queue.Envelope.Waiters) it may be
// the only thing left that would tell them of the id's end — its run may
// even have ended, its end not yet told (a death whose telling failed,
// and the id then scheduled again by a row that never knew of them) — so
// the traffic cop watches the id from then on and applies the end the id
// comes to (issue 38, row 80) — unless a row of the id still waits in the
// schedule saying others wait for it (a reschedule or replace carries
// that over), whose message will tell them. A watch that the service
// might write if asked again is an error: the message is put back to be
// checked again.
func (c *Client) currentOrWatched(ctx context.Context, env queue.Envelope) (bool, error) {
	current, err := c.sched.Current(ctx, env)
	if err != nil || current || !env.Waiters || c.runs == nil {
		return current, err
	}
	switch it, err := c.sched.Get(ctx, env.ID); {
	case err == nil && it.Waiters:
		return false, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return false, err
	}
	if err := c.runs.WatchParents(ctx, []string{env.ID}); err != nil {
		if storage.IsTransient(err) {
			return false, err
		}
		c.o.Logger.Warn("cannot have the traffic cop watch a task others wait for; acknowledging its stale message all the same",
			"task_id", env.ID, "err", err)
	}
	return false, nil
}

// taskEnded is the worker's queue.ConsumerOptions.OnEnd: the run of env
// has ended; its dependents and its batch hear of it. The state is read
// back from its record (a run cancelled while its handler ran stays
// cancelled), so a record that does not say it ended is an error, and
// the message reappears — except a death requeued since (see below).
func (c *Client) taskEnded(ctx context.Context, env queue.Envelope, st leasecrontype.RunState) error {
	r, err := c.runs.Get(ctx, env.ID)
	gone := env.Ended != "" && errors.Is(err, runs.ErrNotFound) // (runs.ErrExpired matches it too)
	if err != nil && !gone {
		return err
	}
	switch {
	case gone:
		// A carried end whose record is gone (retention removed it while
		// the message waited): what it carries is all there is to tell;
		// asked of the record again, the message would come back for
		// good.
		r.State = st
	case !env.Due.IsZero() && !r.OfDue(env.Due):
		// The record is already another scheduling's: this run ended
		// before (it was cancelled while its handler ran, and the id was
		// scheduled again), and its record is gone. What waits for it is
		// told what this worker saw — a cancel after the move has told
		// it already, and telling twice changes nothing — and the message
		// is done with: left to reappear, it would run the task again
		// (issue 38, seed 1123).
		r.State = st
	case !r.State.Finished() && st == leasecrontype.RunDead && env.Waiters:
		// A message of a run whose death is recorded, and which its dead
		// letter's requeue has made live again since: the message says
		// others wait for the id, and may be the only one that does (a
		// child marked the row after the run's first message was sent,
		// and the mover sent the row again; issue 38, seed 70823: the
		// message was acknowledged untold, and the child waited for
		// good). The requeued run's message does not say so, so the
		// traffic cop watches the id and applies the end it comes to, as
		// for a child that began waiting once its parent was in the
		// queue. So a child that marked the row after the run's first
		// message was sent waits for the requeued run's end, even when
		// it began waiting before the death: the death's own message did
		// not know of it, and the record keeps no time of the death to
		// tell them apart by. (Those that marked the row before the
		// first message was sent were told of the death by it.)
		return c.runs.WatchParents(ctx, []string{env.ID})
	case !r.State.Finished():
		return fmt.Errorf("the run record of %s says %s, not ended", env.ID, r.State)
	case env.Waiters && !r.EndOfID(c.o.Clock.Now()):
		// Another scheduling of the id was moved to the queue beside this
		// run and has not started: what waits for the id waits for that
		// one, as a child watched by the traffic cop does (endOf) — the
		// watch applies its end (a review of issue 38's row 53: a child
		// that began waiting after the replacement was moved was released
		// by this end, because another child had marked this run's row).
		if err := c.runs.WatchParents(ctx, []string{env.ID}); err != nil {
			return err
		}
		env.Waiters = false
	}
	if env.Waiters {
		if err := c.parentEndedBy(ctx, env.ID, r.State, env.EndedAt); err != nil {
			return err
		}
	}
	if env.Batch != "" && env.Completed == nil {
		if env.EndOnly {
			// A cancel's message of its own (Client.sendEnded) may not
			// know whether its run is the batch's member or its callback,
			// and a callback's end is not counted.
			switch b, err := c.runs.GetBatch(ctx, env.Batch); {
			case err == nil && b.Callback == env.ID:
				return nil
			case err != nil && !errors.Is(err, runs.ErrNoBatch):
				return err
			}
		}
		return c.memberEnded(ctx, env.Batch, env.ID, r.State)
	}
	return nil
}

// parentEnded applies the end of parent (in state st) to everything
// waiting for it. A child whose row is still being written is left to the
// traffic cop, which watches the parent from then on and applies its end
// once the row is there.
func (c *Client) parentEnded(ctx context.Context, parent string, st RunState) error {
	return c.parentEndedBy(ctx, parent, st, time.Time{})
}

// parentEndedBy is parentEnded for the tasks that began waiting for parent
// by the time by (zero: whenever): a cancel's end told late, in a message
// of its own (Client.sendEnded), leaves alone the tasks that began waiting
// after the cancel, for a later scheduling of the id (README, workflows).
func (c *Client) parentEndedBy(ctx context.Context, parent string, st RunState, by time.Time) error {
	notYet, err := c.applyParentEndBy(ctx, parent, st, by)
	if err != nil || !notYet {
		return err
	}
	return c.runs.WatchParents(ctx, []string{parent})
}

// applyParentEnd is parentEnded without the watch: it reports whether a
// child's row was not written yet.
func (c *Client) applyParentEnd(ctx context.Context, parent string, st RunState) (notYet bool, err error) {
	return c.applyParentEndBy(ctx, parent, st, time.Time{})
}

// applyParentEndBy is applyParentEnd for the dependencies written by the
// time by (zero: all).
func (c *Client) applyParentEndBy(ctx context.Context, parent string, st RunState, by time.Time) (notYet bool, err error) {
	deps, err := c.runs.Dependents(ctx, parent)
	if err != nil {
		return false, err
	}
	if !by.IsZero() {
		deps = slices.DeleteFunc(deps, func(d runs.Dependent) bool { return d.Created.After(by) })
	}
	if len(deps) > 0 {
		failpoint.Hit("parent-ended")
	}
	var g errgroup.Group
	g.SetLimit(8)
	var pending atomic.Bool
	for _, d := range deps {
		g.Go(func() error {
			err := c.applyEnd(ctx, d, st)
			if errors.Is(err, errChildNotYet) {
				pending.Store(true)
				return nil
			}
			return err
		})
	}
	err = g.Wait()
	return pending.Load(), err
}

// errChildNotYet is applyEnd's answer for a dependent whose child has no
// row yet, within orphanGrace: its scheduler may still be writing it.
var errChildNotYet = errors.New("a dependent task's row is not written yet")

// orphanGrace is how long a dependency row whose child has no row yet is
// kept: its scheduler may be writing the row (and looks at the parent
// again afterwards).
const orphanGrace = time.Minute

// applyEnd applies the end of d's parent to its child, then removes d.
func (c *Client) applyEnd(ctx context.Context, d runs.Dependent, st RunState) error {
	sending, sendBy := c.sendWindow(ctx)
	it, verdict, err := c.sched.Release(ctx, d.Child, d.Parent, st == RunSucceeded, sending, sendBy)
	switch {
	case errors.Is(err, ErrNotFound):
		if c.o.Clock.Now().Sub(d.Created) < orphanGrace {
			return errChildNotYet
		}
	case err != nil:
		return fmt.Errorf("release %s after %s: %w", d.Child, d.Parent, err)
	case verdict == schedule.Doomed:
		if err := c.cancelDependent(ctx, it, fmt.Sprintf("cancelled: parent %s ended %s", d.Parent, st)); err != nil {
			return err
		}
	case verdict == schedule.Released:
		c.o.Logger.Debug("task released: every parent has ended", "task_id", it.ID, "last_parent", d.Parent)
		if !it.SendingUntil.IsZero() {
			c.sendNow(ctx, it)
		}
		failpoint.Hit("child-released")
	}
	return c.runs.DropDependent(ctx, d)
}

// sendWindow returns the Sending and sendBy a task released now is
// written with, when this client sends tasks due now itself.
func (c *Client) sendWindow(ctx context.Context) (sending, sendBy time.Time) {
	now := c.o.Clock.Now()
	if !c.sendsNow(Item{Due: now}, now) || c.takeSends(ctx, 1) != 1 {
		return time.Time{}, time.Time{}
	}
	return now.Add(sendGrace), now.Add(c.o.SendWithin)
}

// cancelDependent cancels the waiting task it, whose parent ended without
// succeeding: its run is recorded cancelled with why, what waits for it
// and its batch hear of it, and then its row goes.
func (c *Client) cancelDependent(ctx context.Context, it Item, why string) error {
	if err := c.runs.CancelDependent(ctx, it.ID, runs.Meta{Type: it.Type, Due: it.Due}, why); err != nil {
		return err
	}
	if err := c.endedFlow(ctx, it, RunCancelled); err != nil {
		return err
	}
	removed, err := c.sched.Cancel(ctx, it.ID)
	switch {
	case err == nil:
		c.tellLateWaiters(ctx, removed)
	case !errors.Is(err, ErrNotFound):
		return err
	}
	return nil
}

// tellLateWaiters tells the tasks waiting for it, a waited-for row just
// removed by a cancel, that it ended cancelled — again: the cancel told
// them before it removed the row, and a task that began waiting in
// between, having seen the row pending and found it marked as waited for
// already, is told only now (issue 38, seed 1330: such a child waited for
// good). A task told already is not waiting any more, so telling again
// costs one query and changes nothing else. When that fails the task is
// left to the traffic cop, which watches it and tells them.
func (c *Client) tellLateWaiters(ctx context.Context, it Item) {
	if c.runs == nil || !it.Waiters {
		return
	}
	if err := c.parentEnded(ctx, it.ID, RunCancelled); err != nil {
		c.o.Logger.Warn("telling the tasks waiting for a cancelled task failed; the traffic cop watches it and tells them", "task_id", it.ID, "err", err)
		if err := c.runs.WatchParents(ctx, []string{it.ID}); err != nil {
			c.o.Logger.Error("tasks wait for a cancelled task whose end nothing may report", "task_id", it.ID, "err", err)
		}
	}
}

// cancelWaitedFor is the first step of cancelling the pending task it
// (schedule.CancelWith) when others wait for it or it is a batch member:
// its run is recorded cancelled and they hear of it before its row goes,
// so a client that dies in between leaves a row whose message a worker
// acknowledges as cancelled, telling them again (OnEnd). With only (a bulk
// cancel), another task of the id still under way is left as it is
// (runs.Store.CancelPendingOf).
func (c *Client) cancelWaitedFor(ctx context.Context, it Item, only bool) error {
	if c.runs == nil || !it.EndHeard() {
		return nil
	}
	cancel := c.runs.CancelPending
	if only {
		cancel = c.runs.CancelPendingOf
	}
	unfinished, err := cancel(ctx, it.ID, runs.Meta{Type: it.Type, Due: it.Due})
	if err != nil {
		// Before any telling: the cancel releases the row it holds.
		return fmt.Errorf("%w (%w: the task stays pending)", err, schedule.ErrNoneTold)
	}
	c.cancelledFlow(ctx, unfinished)
	return c.endedFlow(ctx, it, RunCancelled)
}

// endedFlow tells what waits for the pending task it, and its batch, that
// it ended in st without running (cancelled).
func (c *Client) endedFlow(ctx context.Context, it Item, st RunState) error {
	return c.tellEnded(ctx, it.ID, it.Waiters, it.Batch, !it.Callback, st)
}

// tellEnded tells the tasks waiting for id (when waiters) and, when it is
// a member, its batch that id ended in st. Both are told once per task:
// telling again changes nothing.
func (c *Client) tellEnded(ctx context.Context, id string, waiters bool, batch string, member bool, st RunState) error {
	if waiters {
		if err := c.parentEnded(ctx, id, st); err != nil {
			return err
		}
	}
	if batch != "" && member {
		return c.memberEnded(ctx, batch, id, st)
	}
	return nil
}

// watchParents is the traffic cop's look, every every, at the parents
// whose messages do not say that others wait for them.
func (c *Client) watchParents(ctx context.Context, every time.Duration) {
	for clock.Sleep(ctx, c.o.Clock, every) == nil {
		if err := c.SweepWatched(ctx); err != nil && ctx.Err() == nil {
			c.o.Logger.Warn("looking at watched parents failed", "err", err)
		}
	}
}

// SweepWatched applies the end of every watched parent that has ended:
// the parents that were already in the queue when a task began waiting
// for them. The traffic cop calls it every mover pass; it costs one query
// when nothing is watched, and a read per watched parent.
func (c *Client) SweepWatched(ctx context.Context) error {
	if c.runs == nil {
		return nil
	}
	parents, err := c.runs.Watched(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range parents {
		st, ended, err := c.endOf(ctx, p)
		if err == nil && ended {
			var notYet bool
			// Watched until every child's row is there to be released.
			if notYet, err = c.applyParentEnd(ctx, p, st); err == nil && !notYet {
				err = c.runs.Unwatch(ctx, p)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("parent %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// endOf returns how the task id ended, if it has: its run record's state;
// a task with neither a pending row nor a record counts as cancelled. A
// finished record of another due time than the id's pending row is an
// earlier scheduling's (the id was scheduled again after it ended, or
// rescheduled): the pending task has not ended (issue 38, seed 1077: a
// child of an id scheduled again was released by the earlier run's
// success). That costs one more read, of the pending row, for a finished
// record, and when there is no row one more of the record (the mover may
// have moved another scheduling between the two reads; seed 71839),
// whose state is the one returned. Nor has a finished record with another
// scheduling of the id moved beside it and not started
// (runs.Run.EndOfID; seed 3764).
func (c *Client) endOf(ctx context.Context, id string) (RunState, bool, error) {
	r, err := c.runs.Get(ctx, id)
	switch {
	case err == nil && !r.EndOfID(c.o.Clock.Now()):
		return r.State, false, nil
	case err == nil:
		it, gerr := c.sched.Get(ctx, id)
		switch {
		case gerr == nil && !runOf(&it, r):
			return "", false, nil
		case gerr != nil && !errors.Is(gerr, ErrNotFound):
			return "", false, gerr
		case gerr != nil:
			// No row — unless the mover moved another scheduling of the id
			// between the two reads, its mark taking the record over
			// before it removed the row (issue 38, seed 71839: a replaced
			// parent's earlier success, read just before the replacement
			// was moved, released the children waiting for the
			// replacement). A second look at the record tells.
			again, err := c.runs.Get(ctx, id)
			switch {
			case errors.Is(err, runs.ErrNotFound):
			case err != nil:
				return "", false, err
			case !again.EndOfID(c.o.Clock.Now()) || !again.Due.Equal(r.Due):
				return again.State, false, nil
			default:
				return again.State, true, nil // the latest word: a requeued death may have succeeded since
			}
		}
		return r.State, true, nil
	case !errors.Is(err, runs.ErrNotFound):
		return "", false, err
	}
	if _, err := c.sched.Get(ctx, id); err == nil || !errors.Is(err, ErrNotFound) {
		return "", false, err
	}
	// Neither a record nor a row — unless the mover moved the task between
	// the two reads: it records the run queued before it removes the row
	// (issue 38, seed 1091: a child was cancelled as if its parent had
	// been, while the parent was queued and then succeeded). A second look
	// at the record tells.
	switch r, err := c.runs.Get(ctx, id); {
	case err == nil:
		return r.State, r.EndOfID(c.o.Clock.Now()), nil
	case !errors.Is(err, runs.ErrNotFound):
		return "", false, err
	}
	return RunCancelled, true, nil
}

// Dependents returns the ids of the tasks still waiting for id (one
// query): a task leaves the list once id's end has been applied to it.
func (c *Client) Dependents(ctx context.Context, id string) ([]string, error) {
	if c.runs == nil {
		return nil, nil
	}
	deps, err := c.runs.Dependents(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(deps))
	for i, d := range deps {
		out[i] = d.Child
	}
	return out, nil
}

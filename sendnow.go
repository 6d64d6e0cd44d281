package leasecron

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/schedule"
)

// Tasks due now go straight to the queue. A task (a series: its first
// occurrence) that Schedule or ScheduleMany makes due within
// ClientOptions.SendWithin, and a one-off task RunNow makes due, is sent by
// the client itself instead of waiting up to a mover pass: the row is
// written marked as being sent, the message is sent with a token, the run
// of a one-off task is recorded queued with the token, and the row is
// marked sent (and confirmed) with it (see schedule's sendnow.go); from
// there on it is a task the mover sent early. Every guarantee of such a
// task holds: cancel, reschedule and replace through the Client still apply
// until the mover moves the row (the last two take the confirmation back),
// a duplicate id is refused while it is pending, and a client that dies
// midway leaves a row the mover moves once sendGrace has passed.

// DefaultSendWithin is ClientOptions.SendWithin's default: one mover pass
// (mover.poll_every's default).
const DefaultSendWithin = schedule.DefaultPollEvery

// sendGrace is how long the mover leaves a row alone while its client
// sends the message (schedule.AddOptions.Sending): long enough for a few
// retries of a throttled request, and the most a task is late when its
// client dies between writing the row and sending.
const sendGrace = 15 * time.Second

// sendsNow reports whether Schedule sends it itself.
func (c *Client) sendsNow(it Item, now time.Time) bool {
	return c.runs != nil && c.o.SendWithin > 0 && !it.Due.After(now.Add(c.o.SendWithin))
}

// sendNow sends the message of a one-off task written with
// schedule.AddOptions.Sending (it as Add or RescheduleWith returned it).
func (c *Client) sendNow(ctx context.Context, it Item) { c.sendAll(ctx, []Item{it}) }

// sendAll sends the messages of tasks written with Sending, a few at a
// time, then records the runs of the one-off ones queued with their tokens
// (a transaction per run partition and 33 runs) and marks their rows sent
// (a transaction per shard and 100 rows). A failure is logged, not returned:
// the tasks are scheduled either way, and the mover sends any unmarked one
// once the grace has passed.
func (c *Client) sendAll(ctx context.Context, items []Item) {
	now := c.o.Clock.Now()
	sent := make([]schedule.Sent, len(items))
	ok := make([]bool, len(items))
	var g errgroup.Group
	g.SetLimit(sendConcurrency)
	for i, it := range items {
		if !it.SendingUntil.IsZero() && !now.Before(it.SendingUntil) {
			// Its grace has passed (a large batch took that long to
			// write): the mover sends it, and a send now could be of a
			// row that has changed since.
			continue
		}
		g.Go(func() error {
			token := schedule.NewToken()
			env, err := c.sched.Envelope(it, token, now)
			if err == nil {
				err = c.queue.Enqueue(ctx, env, max(0, it.Due.Sub(now)))
			}
			if err != nil {
				c.o.Logger.Warn("sending a task due now failed; the mover sends it within its grace", "task_id", it.ID, "grace", sendGrace, "err", err)
				return nil
			}
			sent[i], ok[i] = schedule.Sent{Item: it, Token: token}, true
			return nil
		})
	}
	_ = g.Wait()
	var done []schedule.Sent
	var marks []runs.Mark
	var marked []int // index in done of each mark
	for i, s := range sent {
		if !ok[i] {
			continue
		}
		if it := s.Item; it.Recurrence == "" {
			// Recorded queued with the token, the worker's claim is one
			// write, and the mover moves the row without confirming it.
			// (A series' occurrence is checked against its row instead.)
			marked = append(marked, len(done))
			marks = append(marks, runs.Mark{ID: it.ID, Meta: runs.Meta{Type: it.Type, Due: it.Due, Token: s.Token, Batch: it.Batch}})
		}
		done = append(done, s)
	}
	if len(done) == 0 {
		return
	}
	for i, ok := range c.runs.ConfirmSent(ctx, marks) {
		done[marked[i]].Confirmed = ok
	}
	for i, err := range c.sched.MarkSentMany(ctx, done) {
		switch {
		case err == nil, errors.Is(err, ErrNotFound):
			// Marked, or the row is gone: nothing to take back (see
			// takeBackOnMarkRefused).
		case takeBackOnMarkRefused(err):
			// The row changed since it was written (rescheduled, replaced):
			// the message is stale, and a confirmation recorded just before
			// the change must not let it run. Cleared only if the run still
			// carries this token.
			// Unless the mark is ours after all: it committed, its answer
			// was lost, and the retry found the row changed by itself.
			if s := done[i]; s.Confirmed && !c.markLanded(ctx, s, now) {
				if err := c.runs.Unconfirm(ctx, s.Item.ID, s.Token); err != nil {
					c.o.Logger.Warn("cannot take back the confirmation of a task changed while it was sent; its old message may run once", "task_id", s.Item.ID, "err", err)
				}
			}
		default:
			c.o.Logger.Warn("marking a task due now as sent failed; the mover may send it again (a worker runs it once)", "task_id", done[i].Item.ID, "err", err)
		}
	}
}

// takeBackOnMarkRefused reports whether a sender whose mark on its row was
// refused with err takes its run's confirmation back. Only for a row that
// changed (ErrPreconditionFailed): a row that is gone (ErrNotFound) was
// either moved by the mover, which found this very confirmation and left
// the message to stand for the row (taken back, the message is then
// acknowledged as stale and the task never runs: issue 38, the
// simulator's seed 15, a mark delayed 12 s by faults), or cancelled, and
// a cancel records the run cancelled itself.
func takeBackOnMarkRefused(err error) bool {
	return errors.Is(err, storage.ErrPreconditionFailed)
}

// markLanded reports whether the row of s carries its token: the mark
// whose answer was refused had committed (a lost answer retried), and the
// message still stands for the row — or the row is gone since, which
// takeBackOnMarkRefused leaves alone as it would have had the mark's
// answer said so (issue 38, seed 2647: the mark committed, its answer
// was lost, the mover removed the row it found marked, and the retry's
// refusal took the confirmation back: the task never ran). A read that
// keeps failing counts as landed too: taken back, a message that still
// stands would never run, while a change of the row takes back the
// confirmation itself (a reschedule, a replace; a cancel records the run
// cancelled).
func (c *Client) markLanded(ctx context.Context, s schedule.Sent, now time.Time) bool {
	env, err := c.sched.Envelope(s.Item, s.Token, now)
	if err != nil {
		return false
	}
	var cur, gone bool
	err = retry.Transient(ctx, retry.Policy{Tries: 3, Clock: c.o.Clock}, func(ctx context.Context) error {
		var err error
		cur, gone, err = c.sched.CurrentOrGone(ctx, env)
		return err
	})
	if err != nil {
		c.o.Logger.Warn("cannot read the row of a task whose mark was refused; keeping its confirmation", "task_id", s.Item.ID, "err", err)
		return true
	}
	return cur || gone
}

// sendConcurrency bounds the messages sent at once.
const sendConcurrency = 32

// sendBudget bounds what a client sends itself under backpressure
// (ClientOptions.MaxDepth): it reads the work queue's depth at most once a
// second and hands out max_depth − depth sends until the next read, so a
// burst of tasks due now fills the queue to max_depth and leaves the rest
// to the mover, which holds back as for any other rows.
type sendBudget struct {
	mu   ctxlock.Mutex // held across the read of the depth
	at   time.Time
	left int
}

// sendBudgetEvery is how long a read of the queue's depth is trusted.
const sendBudgetEvery = time.Second

// takeSends returns how many of n tasks due now the client may send itself
// (all of them without backpressure).
func (c *Client) takeSends(ctx context.Context, n int) int {
	if c.o.MaxDepth <= 0 || n <= 0 {
		return n
	}
	b := &c.budget
	if b.mu.LockContext(ctx) != nil {
		return 0 // the mover sends them
	}
	defer b.mu.Unlock()
	if now := c.o.Clock.Now(); b.at.IsZero() || now.Sub(b.at) >= sendBudgetEvery {
		depth, err := c.queue.Depth(ctx)
		if err != nil {
			c.o.Logger.Debug("queue depth unknown; leaving tasks due now to the mover", "err", err)
			return 0
		}
		b.at, b.left = now, max(0, c.o.MaxDepth-depth)
	}
	take := min(n, b.left)
	b.left -= take
	return take
}

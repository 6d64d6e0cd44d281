package leasecron

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// Tasks due now go straight to the queue. A task (a series: its first
// occurrence) that Schedule or ScheduleMany makes due within
// ClientOptions.SendWithin, and a one-off task RunNow makes due, is sent by
// the client itself instead of waiting up to a mover pass: the row is
// written marked as being sent, the message is sent, the run is recorded
// queued with the message's token, and the row is marked sent (see
// schedule's sendnow.go). Every guarantee of a task the mover sends early
// holds: cancel, reschedule and replace still apply until the mover moves
// the row, a duplicate id is refused while it is pending, and a client that
// dies midway leaves a row the mover moves once sendGrace has passed.

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

// sendAll sends the messages of one-off tasks written with Sending, a few
// at a time, then records their runs queued with their tokens (a
// transaction per partition and 33 runs) and marks their rows sent (a
// transaction per shard and 100 rows). A failure is logged, not returned:
// the tasks are scheduled either way, and the mover sends any unmarked one
// once the grace has passed.
func (c *Client) sendAll(ctx context.Context, items []Item) {
	now := c.o.Clock.Now()
	sent := make([]schedule.Sent, len(items))
	envs := make([]queue.Envelope, len(items))
	ok := make([]bool, len(items))
	var g errgroup.Group
	g.SetLimit(sendConcurrency)
	for i, it := range items {
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
			sent[i], envs[i], ok[i] = schedule.Sent{Item: it, Token: token}, env, true
			return nil
		})
	}
	_ = g.Wait()
	var marks []runs.Mark
	var done []schedule.Sent
	for i, s := range sent {
		if ok[i] {
			env := envs[i]
			marks = append(marks, runs.Mark{ID: env.ID, Meta: runs.Meta{Type: env.Type, Due: env.Due, Token: s.Token, Seq: env.Seq}})
			done = append(done, s)
		}
	}
	if len(done) == 0 {
		return
	}
	// Recorded queued with the token, a worker's claim succeeds without
	// reading the row; a worker faster than this reads the row instead.
	c.runs.Confirm(ctx, marks)
	for i, err := range c.sched.MarkSentMany(ctx, done) {
		if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, ErrNotFound) {
			c.o.Logger.Warn("marking a task due now as sent failed; the mover may send it again (a worker runs it once)", "task_id", done[i].Item.ID, "err", err)
		}
	}
}

// sendConcurrency bounds the messages sent at once.
const sendConcurrency = 32

package leasecron

import (
	"cmp"
	"context"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/wakenote"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// earlyWindow is the mover's enqueue-early window: Mover.Early, or by
// default one failover — lease duration + lease poll — so that a task
// scheduled before its leader dies is already in the queue, invisible until
// due, and runs on time through the failover. Never shorter than a pass.
func earlyWindow(m schedule.MoverSettings, l trafficcop.Timing) time.Duration {
	if m.Early != 0 {
		return m.Early
	}
	l = l.WithDefaults()
	return max(l.LeaseDuration+l.PollEvery, cmp.Or(m.PollEvery, schedule.DefaultPollEvery))
}

// wakeNote is the leader's note: when the messages its mover enqueued
// early come due.
func (w *Worker) wakeNote() string {
	w.mu.Lock()
	m := w.mover
	w.mu.Unlock()
	if m == nil {
		return ""
	}
	return wakenote.Encode(m.Upcoming(w.o.Clock.Now(), wakenote.Max))
}

// heardWakeNote hands the leader's wake note to this worker's consumer.
func (w *Worker) heardWakeNote(note string) {
	w.mu.Lock()
	c := w.consumer
	w.mu.Unlock()
	if c == nil {
		return
	}
	now := w.o.Clock.Now()
	for _, t := range wakenote.Decode(note) {
		if t.After(now) {
			c.WakeAt(t)
		}
		// A message the leader's consumer held until due reappears within
		// a second after it (queue: a held message's visibility is cut to
		// its due time) if the leader died holding it: look again then.
		if r := t.Add(rescueAfter); r.After(now) {
			c.WakeAt(r)
		}
	}
}

// rescueAfter is how long after a due time a standby looks again for a
// message whose holder may have died (see heardWakeNote).
const rescueAfter = 1100 * time.Millisecond

// confirmEarly records the runs of early-sent tasks as queued with their
// tokens before the mover moves their rows (schedule.MoverOptions.Confirm):
// a worker that receives such a message then knows without reading the row
// that it still stands for its task.
func (w *Worker) confirmEarly(ctx context.Context, envs []queue.Envelope) []bool {
	marks := make([]runs.Mark, len(envs))
	for i, e := range envs {
		marks[i] = runs.Mark{ID: e.ID, Meta: runs.Meta{Type: e.Type, Due: e.Due, Generation: e.Generation, Token: e.Token, Batch: e.Batch, Read: e.Enqueued}}
	}
	return w.runs.Confirm(ctx, marks)
}

// unconfirmEarly takes a confirmation back when the task's row changed
// before the mover could move it (schedule.MoverOptions.Unconfirm).
func (w *Worker) unconfirmEarly(ctx context.Context, env queue.Envelope) error {
	return w.runs.Unconfirm(ctx, env.ID, env.Token)
}

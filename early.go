package leasecron

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
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

// Wake notes: the leader publishes, in the lease metadata with every
// renewal (trafficcop.Options.Note), when the messages it has enqueued early
// come due; every other worker's consumer looks for work at those times. If
// the leader dies, its tasks still start on time although no consumer is
// told by the mover any more, and however far the others' polling has
// backed off.
const (
	wakeNotePrefix = "wake1:"
	// maxWakeNote bounds the due times in one note (each takes about five
	// bytes; trafficcop.MaxNote is 2 KiB).
	maxWakeNote = 300
)

// encodeWakeNote renders due times (sorted) as "wake1:{first unix ms in
// base 36}:{offsets from it in ms, base 36, comma-separated}".
func encodeWakeNote(dues []time.Time) string {
	if len(dues) == 0 {
		return ""
	}
	base := dues[0].UnixMilli()
	var b strings.Builder
	b.WriteString(wakeNotePrefix)
	b.WriteString(strconv.FormatInt(base, 36))
	b.WriteByte(':')
	for i, d := range dues {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d.UnixMilli()-base, 36))
	}
	return b.String()
}

// decodeWakeNote parses encodeWakeNote's form; anything else yields nothing.
func decodeWakeNote(s string) []time.Time {
	rest, ok := strings.CutPrefix(s, wakeNotePrefix)
	if !ok {
		return nil
	}
	head, list, ok := strings.Cut(rest, ":")
	base, err := strconv.ParseInt(head, 36, 64)
	if !ok || err != nil || list == "" {
		return nil
	}
	parts := strings.Split(list, ",")
	out := make([]time.Time, 0, min(len(parts), maxWakeNote))
	for _, p := range parts[:min(len(parts), maxWakeNote)] {
		off, err := strconv.ParseInt(p, 36, 64)
		if err != nil || off < 0 {
			return nil
		}
		out = append(out, time.UnixMilli(base+off))
	}
	return out
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
	return encodeWakeNote(m.Upcoming(w.o.Clock.Now(), maxWakeNote))
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
	for _, t := range decodeWakeNote(note) {
		if t.After(now) {
			c.WakeAt(t)
		}
	}
}

// confirmEarly records the runs of early-sent tasks as queued with their
// tokens before the mover moves their rows (schedule.MoverOptions.Confirm):
// a worker that receives such a message then knows without reading the row
// that it still stands for its task.
func (w *Worker) confirmEarly(ctx context.Context, envs []queue.Envelope) []bool {
	marks := make([]runs.Mark, len(envs))
	for i, e := range envs {
		marks[i] = runs.Mark{ID: e.ID, Meta: runs.Meta{Type: e.Type, Due: e.Due, Generation: e.Generation, Token: e.Token}}
	}
	return w.runs.Confirm(ctx, marks)
}

// unconfirmEarly takes a confirmation back when the task's row changed
// before the mover could move it (schedule.MoverOptions.Unconfirm).
func (w *Worker) unconfirmEarly(ctx context.Context, env queue.Envelope) error {
	return w.runs.Unconfirm(ctx, env.ID, env.Token)
}

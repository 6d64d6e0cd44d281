package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
)

// maxWakes bounds the pending wake hints.
const maxWakes = 1024

// maxEarlyWait is the furthest ahead of its Due that a delivered envelope
// is held until due (see Consumer).
const maxEarlyWait = 2 * time.Second

// wakeSet is the consumer's set of pending wake hints: sorted, distinct
// times. kick (capacity 1) tells a
// sleeping loop that the earliest hint moved earlier.
type wakeSet struct {
	mu   sync.Mutex
	at   []time.Time
	kick chan struct{}
}

func newWakeSet() *wakeSet { return &wakeSet{kick: make(chan struct{}, 1)} }

// add records a hint at t. When the set is full the latest hint is
// dropped (or t itself, if it is the latest).
func (w *wakeSet) add(t time.Time) {
	w.mu.Lock()
	i, found := slices.BinarySearchFunc(w.at, t, func(a, b time.Time) int { return a.Compare(b) })
	if found || (len(w.at) >= maxWakes && i == len(w.at)) {
		w.mu.Unlock()
		return
	}
	if len(w.at) >= maxWakes {
		w.at = w.at[:len(w.at)-1]
	}
	w.at = slices.Insert(w.at, i, t)
	w.mu.Unlock()
	if i == 0 {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// next returns the earliest pending hint.
func (w *wakeSet) next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.at) == 0 {
		return time.Time{}, false
	}
	return w.at[0], true
}

// take removes the hints at or before now.
func (w *wakeSet) take(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := 0
	for i < len(w.at) && !w.at[i].After(now) {
		i++
	}
	w.at = slices.Delete(w.at, 0, i)
}

// pending returns how many hints are pending (a test aid).
func (w *wakeSet) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.at)
}

// WakeAt asks the consumer to dequeue no later than t (once it has a free
// handler slot): a producer that has just enqueued a message visible from t
// calls it so an idle consumer, whose polling has backed off towards
// PollMax, still picks the message up on time. The time Enqueue returned
// plus the delay is a good t: the message is visible by then whatever the
// rounding (and the consumer holds one that is early until its Due).
// When a hint comes due the
// polling backoff also snaps back to PollMin, so a message that appears a
// moment after t is found by the next quick polls. A t in the past means
// "dequeue again now".
//
// Hints are kept until they come due, earliest first; at most 1024
// distinct ones are pending (beyond that the latest are dropped and those
// messages are found by regular polling). WakeAt is safe for concurrent
// use, never blocks, and may be called before Run.
func (c *Consumer) WakeAt(t time.Time) { c.wakes.add(t) }

// Listen makes the consumer poll at least every ListenEvery (on) or lets
// its polling back off to PollMax again (off); turning it on cuts a long
// wait short. leasecron's worker listens while it leads, so that an idle
// fleet has one consumer that finds a task sent for now within a fraction
// of a second while the others poll rarely. It does nothing when
// ListenEvery is negative, and is safe for concurrent use.
func (c *Consumer) Listen(on bool) {
	if c.o.ListenEvery <= 0 {
		return
	}
	if c.listening.Swap(on) != on && on {
		c.WakeAt(c.clk.Now())
	}
}

// Listening reports whether the consumer listens (Listen).
func (c *Consumer) Listening() bool { return c.listening.Load() }

// Busy reports whether the consumer got messages in the last 10 seconds:
// then the queues it drains are worth looking for often (a new priority
// level or fairness lane, see Client.DrainOthers).
func (c *Consumer) Busy() bool {
	last := c.lastFound.Load()
	return last != 0 && c.clk.Now().Sub(time.Unix(0, last)) < 10*time.Second
}

// sleep waits wait before the next dequeue, or less when a wake hint comes
// due first; then the polling backoff p snaps back to PollMin. It reports
// false when ctx ends.
func (c *Consumer) sleep(ctx context.Context, wait time.Duration, p *poller) bool {
	deadline := c.clk.Now().Add(wait)
	for {
		// A kick left over from a hint added while the loop was busy is
		// stale: the hints are read below.
		select {
		case <-c.wakes.kick:
		default:
		}
		now := c.clk.Now()
		d, hinted := deadline.Sub(now), false
		if h, ok := c.wakes.next(); ok && !h.After(deadline) {
			d, hinted = h.Sub(now), true
		}
		if d <= 0 {
			if hinted {
				c.wakes.take(now)
				p.got()
				// Woken for a message: ask every queue, highest level
				// first, not just the next one in turn.
				if s, ok := c.work.(interface{ Sweep() }); ok {
					s.Sweep()
				}
			}
			return true
		}
		t := c.clk.NewTimer(d)
		if c.hooks.idle != nil {
			c.hooks.idle(d)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-c.wakes.kick:
			t.Stop()
		case <-t.C():
		}
	}
}

// earlyLimit is how far ahead of its Due an envelope may be held: at most
// maxEarlyWait and half the visibility timeout, so the held message cannot
// reappear for another worker meanwhile.
func (c *Consumer) earlyLimit() time.Duration {
	return min(maxEarlyWait, c.o.VisibilityTimeout/2)
}

// untilDue holds a delivery whose envelope is due a little in the future
// (its message was enqueued with a delay rounded down to whole seconds)
// until its Due on the consumer's clock, keeping its handler slot (one
// due further ahead than earlyLimit was put back before it got here). It
// reports hold: run the task; false with gone: the
// message is no longer this delivery's (another worker took it), leave it
// alone; false otherwise: the consumer is stopping, put it back.
//
// While it holds a message, the message's visibility is cut to the time
// left (rounded up to the second), so that if this worker dies holding it
// — a leader killed a moment before an occurrence is due — the message
// reappears for the others at its due time rather than after the whole
// visibility timeout; at the due time it is extended again before the
// task runs. That costs two queue requests per held message.
func (c *Consumer) untilDue(stop <-chan struct{}, hctx context.Context, d *delivery) (hold, gone bool) {
	if d.env.Due.IsZero() {
		return true, false
	}
	early := d.env.Due.Sub(c.clk.Now())
	if early <= 0 || mutate.On(mutate.EarlyStart) {
		return true, false
	}
	shortened := false
	// The cut records this delivery (Dequeues), as every other hand-back
	// does: should the hold be lost (the cut's answer lost, the message
	// handed out again, this worker stopping), the next delivery does not
	// count it as a crash (the crash guard; sweep seed 150965: a task of
	// one attempt set aside as "delivered 3 times" around its due time,
	// its handler never run). The extension at the due time writes the
	// text back as it came, so that a handler which then crashes its
	// worker is counted as before.
	text := d.m.Text // as it came
	if early < c.o.VisibilityTimeout-time.Second {
		held := d.env
		held.Dequeues = d.m.DequeueCount
		cut, terr := encodeSized(held)
		if terr != nil {
			cut = d.m.Text
		}
		ctx, cancel := c.opCtx(hctx)
		m, err := c.work.Update(ctx, d.m, cut, early)
		cancel()
		switch {
		case err == nil:
			// d.m.Text stays as it came: every later rewrite of this
			// delivery (the extension, a heartbeat, a fallback) writes
			// it, not the cut's record.
			d.m, shortened = m, true
			d.m.Text = text
		case errors.Is(err, ErrMessageGone):
			return false, true
		}
	}
	t := c.clk.NewTimer(early)
	defer t.Stop()
	// Waiting needs no handler slot: give it back so that messages already
	// due keep running, and take one again when this one is due.
	if d.slot != nil && d.slot.held {
		<-c.slots
		d.slot.held = false
	}
	if c.hooks.early != nil {
		c.hooks.early(d.env.ID, early)
	}
	select {
	case <-t.C():
	case <-stop:
		return false, false
	}
	if shortened {
		ctx, cancel := c.opCtx(hctx)
		at := c.clk.Now()
		m, err := c.work.Update(ctx, d.m, text, c.o.VisibilityTimeout)
		cancel()
		switch {
		case err == nil:
			d.m, d.visSince = m, at
		case errors.Is(err, ErrMessageGone):
			return false, true
		default:
			// It may reappear for another worker within a second: the run
			// claim keeps the two from both running it.
			d.log.Warn("extending a held message's visibility failed", "err", err)
		}
	}
	if d.slot != nil && !d.slot.held {
		select {
		case c.slots <- struct{}{}:
			d.slot.held = true
		case <-stop:
			return false, false
		}
	}
	return true, false
}

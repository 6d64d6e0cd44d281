package queue

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/retry"
)

// errorBackoffMax caps the wait after failed dequeues: short enough that a
// consumer is back within seconds when a busy account recovers.
const errorBackoffMax = 5 * time.Second

// loop dequeues and dispatches until ctx ends.
func (c *Consumer) loop(ctx, hctx context.Context, wg *sync.WaitGroup) {
	p := newPoller(c.o.PollMin, c.o.PollMax, c.o.rand)
	batch := min(MaxBatch, c.o.Concurrency)
	busy := false // the last dequeue filled every slot it asked for
	failures := 0 // dequeues failed in a row
	for ctx.Err() == nil {
		// Wait for one free slot, then take up to MaxBatch.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1 + c.takeSlots(MaxBatch-1, nil)
		if busy && n < batch/2 {
			// The queue has more: rather than pay a dequeue for every
			// few slots that free up, linger briefly until half of a
			// batch is free.
			t := time.NewTimer(batchLinger)
			n += c.takeSlots(batch/2-n, t.C)
			t.Stop()
		}
		msgs, err := c.work.Dequeue(ctx, n, c.o.VisibilityTimeout)
		if len(msgs) > 0 {
			c.lastFound.Store(c.clk.Now().UnixNano())
		}
		busy = err == nil && len(msgs) == n
		for i := len(msgs); i < n; i++ {
			<-c.slots
		}
		var wait time.Duration
		if err == nil {
			failures = 0
		}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			// A failed dequeue says nothing about the queue being empty:
			// back off from poll_min on its own count (throttling asks
			// for it), not from the idle interval.
			failures++
			wait = retry.After(err, c.o.PollMin, errorBackoffMax, failures, c.o.rand())
			c.log.Warn("dequeue failed", "err", err, "retry_in", wait)
		case len(msgs) == 0:
			wait = p.empty()
		default:
			p.got()
			if len(msgs) < n {
				wait = p.drained()
			}
		}
		if err == nil && c.listening.Load() && wait > c.o.ListenEvery {
			wait = c.o.ListenEvery
		}
		c.stats.mu.Lock()
		c.stats.poll = p.interval()
		c.stats.mu.Unlock()
		if c.o.Observer != nil {
			c.o.Observer.OnPoll(len(msgs), wait)
		}
		for _, m := range msgs {
			wg.Add(1)
			c.stats.mu.Lock()
			c.stats.inFlight++
			c.stats.mu.Unlock()
			go func(m Message) {
				slot := &slotHold{held: true}
				defer func() {
					c.stats.mu.Lock()
					c.stats.inFlight--
					c.stats.mu.Unlock()
					if slot.held {
						<-c.slots
					}
					if slot.settling {
						<-c.settling
					}
					if c.hooks.finished != nil {
						c.hooks.finished()
					}
					wg.Done()
				}()
				c.process(ctx.Done(), hctx, m, slot)
			}(m)
		}
		if wait > 0 && !c.sleep(ctx, wait, p) {
			return
		}
	}
}

// batchLinger bounds how long a busy consumer waits for more free slots
// before it dequeues (real time: it only ever shortens to nothing).
const batchLinger = 20 * time.Millisecond

// takeSlots takes up to n more free handler slots and returns how many it
// took: the free ones at once, then, until linger fires (nil: no waiting),
// those that free up.
func (c *Consumer) takeSlots(n int, linger <-chan time.Time) int {
	took := 0
	for took < n {
		if linger == nil {
			select {
			case c.slots <- struct{}{}:
				took++
			default:
				return took
			}
			continue
		}
		select {
		case c.slots <- struct{}{}:
			took++
		case <-linger:
			return took
		}
	}
	return took
}

package queue

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"
)

// PauseSource says which task types are paused across the fleet: the types
// and, for each, when its pause ends by itself (the zero time: not until it
// is resumed). leasecron's pause blob implements it (`leasecron pause`).
type PauseSource interface {
	PausedTypes(ctx context.Context) (map[string]time.Time, error)
}

// maxHeld bounds how many paused messages one consumer remembers, to show
// them again the moment their type is resumed. Beyond it, messages
// reappear after PauseHold.
const maxHeld = 10_000

// pauseState is the consumer's view of the pause state: the last read of
// the PauseSource, and the paused messages this consumer hid, by message id,
// with their latest pop receipts.
type pauseState struct {
	mu     sync.Mutex
	types  map[string]time.Time
	readAt time.Time // zero: never read
	okAt   time.Time // when a read last succeeded (zero: never)
	held   map[string]heldMsg
}

type heldMsg struct {
	typ string
	m   Message
	at  time.Time // when it was hidden
}

// pausedUntil reports whether typ is paused now (and until when; zero:
// until resumed), reading the PauseSource when the last read is older than
// PauseCheck. A failed read keeps the last known state: a storage outage
// neither pauses nor resumes anything (a read that fails when the state
// kept is older than two checks is tried once more first).
func (c *Consumer) pausedUntil(hctx context.Context, typ string) (time.Time, bool) {
	if c.o.Pauses == nil {
		return time.Time{}, false
	}
	c.refreshPauses(hctx, false)
	c.pause.mu.Lock()
	defer c.pause.mu.Unlock()
	return pausedAt(c.pause.types, typ, c.clk.Now())
}

// QueuePauseKey is the key under which the pause state records a paused
// named queue ("" is the default queue): "queue:{name}", which no task
// type can be.
func QueuePauseKey(name string) string { return "queue:" + cmp.Or(name, DefaultRouteQueue) }

func pausedAt(types map[string]time.Time, typ string, now time.Time) (time.Time, bool) {
	until, ok := types[typ]
	if !ok || (!until.IsZero() && !until.After(now)) {
		return time.Time{}, false
	}
	return until, true
}

// refreshPauses reads the PauseSource if the last read is older than
// PauseCheck (or always, with force). One read at a time; callers that
// find a read in progress use its result.
func (c *Consumer) refreshPauses(hctx context.Context, force bool) {
	if c.pauseRead.LockContext(hctx) != nil {
		return // stopping: the last known state will do
	}
	defer c.pauseRead.Unlock()
	c.pause.mu.Lock()
	fresh := !c.pause.readAt.IsZero() && c.clk.Now().Sub(c.pause.readAt) < c.o.PauseCheck
	c.pause.mu.Unlock()
	if fresh && !force {
		return
	}
	types, err := c.readPauses(hctx)
	c.pause.mu.Lock()
	stale := c.clk.Now().Sub(c.pause.okAt) > 2*c.o.PauseCheck
	c.pause.mu.Unlock()
	if err != nil && stale && hctx.Err() == nil {
		// The state kept is older than two checks (the read was held up,
		// or its process stopped, past its timeout): one more try, with a
		// fresh timeout, before trusting it for another PauseCheck (issue
		// 38, the simulator's seed 77038: a worker frozen for 70 s with a
		// read in hand ran a type paused meanwhile on the state it had
		// read before the freeze).
		types, err = c.readPauses(hctx)
	}
	c.pause.mu.Lock()
	defer c.pause.mu.Unlock()
	c.pause.readAt = c.clk.Now()
	if err != nil {
		c.log.Warn("reading the pause state failed; keeping the last known state", "err", err, "read_ok_at", c.pause.okAt)
		return
	}
	c.pause.types, c.pause.okAt = types, c.pause.readAt
}

// readPauses reads the PauseSource once, within the storage timeout.
func (c *Consumer) readPauses(hctx context.Context) (map[string]time.Time, error) {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	return c.o.Pauses.PausedTypes(ctx)
}

// holdPaused hides a message of a paused type without counting an attempt:
// until the pause ends, or PauseHold for a pause without an end, and
// remembers it so that it can be shown again as soon as the type resumes.
func (c *Consumer) holdPaused(hctx context.Context, d *delivery, key string, until time.Time) {
	c.handBack(hctx, d)
	now := c.clk.Now()
	delay := c.o.PauseHold
	if !until.IsZero() {
		delay = min(until.Sub(now), MaxVisibility)
	}
	env := d.env
	env.Dequeues = d.m.DequeueCount
	if !c.rewrite(hctx, d, env, delay) {
		c.settle(d, OutcomeLeft)
		return
	}
	d.log.Debug("type is paused; message put back", "until", until, "hidden_for", delay)
	c.pause.mu.Lock()
	if len(c.pause.held) < maxHeld {
		c.pause.held[d.m.ID] = heldMsg{typ: key, m: d.m, at: now}
	}
	c.pause.mu.Unlock()
	c.settle(d, OutcomePaused)
}

// watchPauses runs while the consumer does: every PauseCheck, if it holds
// paused messages, it reads the pause state and shows again at once the
// messages whose type is no longer paused, then wakes the loop. With
// nothing held it makes no request.
func (c *Consumer) watchPauses(ctx, hctx context.Context) {
	for {
		t := c.clk.NewTimer(c.o.PauseCheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		c.pause.mu.Lock()
		n := len(c.pause.held)
		c.pause.mu.Unlock()
		if n == 0 {
			continue
		}
		c.refreshPauses(hctx, true)
		n = c.releaseResumed(hctx)
		if n > 0 {
			c.WakeAt(c.clk.Now())
		}
		if c.hooks.released != nil {
			c.hooks.released(n)
		}
	}
}

// releaseResumed makes the held messages of types no longer paused visible
// again and forgets them, and forgets those hidden longer than PauseHold
// (they are visible again by now, their receipts stale). It returns how
// many it released.
func (c *Consumer) releaseResumed(hctx context.Context) int {
	now := c.clk.Now()
	var release []heldMsg
	c.pause.mu.Lock()
	for id, h := range c.pause.held {
		switch _, paused := pausedAt(c.pause.types, h.typ, now); {
		case !paused:
			release = append(release, h)
			delete(c.pause.held, id)
		case now.Sub(h.at) >= c.o.PauseHold:
			delete(c.pause.held, id)
		}
	}
	c.pause.mu.Unlock()
	released := 0
	for _, h := range release {
		ctx, cancel := c.opCtx(hctx)
		_, err := c.work.Update(ctx, h.m, h.m.Text, 0)
		cancel()
		switch {
		case err == nil:
			released++
		case errors.Is(err, ErrMessageGone):
			// Redelivered meanwhile: its new holder has it.
		default:
			c.log.Warn("showing a resumed message again failed; it reappears when its pause hold ends",
				"message", h.m.ID, "type", h.typ, "err", err)
		}
	}
	if released > 0 {
		c.log.Info("type resumed: paused messages shown again", "messages", released)
	}
	return released
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// delivery is the state of one message being processed.
type delivery struct {
	m       Message
	env     Envelope
	typ     string
	start   time.Time
	maxA    int
	log     *slog.Logger
	claimed bool
	// claimAt is when its claim was last asked for or confirmed (Claim,
	// Extend), and claimUntil the expiry that write gave it: a claim not
	// confirmed within claimFresh is confirmed before the handler.
	claimAt, claimUntil time.Time
	slot                *slotHold // nil outside the consumer loop (tests)
	pauseAt             time.Time // when its pause was last checked
	// visSince is when the message was last made invisible for the
	// VisibilityTimeout (its receipt, or an update): its handler's first
	// extension is due two thirds of that later, however long the
	// delivery took to get there.
	visSince time.Time
	// rowChecked says its claim was made after its row was checked (an
	// early-sent message its run record did not confirm): see handBack.
	rowChecked bool
	span       trace.Span // the delivery's leasecron.run span; nil for a malformed message
}

// slotHold records whether a delivery holds one of the consumer's
// concurrency slots. A message that arrives before it is due gives its slot
// back while it waits, so waiting messages never keep due ones from running;
// a delivery whose handler has returned gives it back for a settling token
// (see handOff).
type slotHold struct{ held, settling bool }

// process takes one message through decode, guards, the wait until due,
// claim, handler and outcome. It never panics and never deletes a message
// unless the run succeeded, was a duplicate or cancelled, or was set aside.
// stop closes when the consumer begins to shut down.
func (c *Consumer) process(stop <-chan struct{}, hctx context.Context, m Message, slot *slotHold) {
	d := &delivery{m: m, start: c.clk.Now(), typ: MalformedType, slot: slot}
	d.visSince = d.start
	d.log = c.log.With("message", m.ID)
	env, err := decodeBody(m.Text)
	if err != nil {
		reason := err.Error()
		d.log.Warn("setting aside a malformed message", "reason", reason, "dequeue_count", m.DequeueCount)
		rec := DeadLetter{Reason: reason, Body: m.Text, Queue: c.work.Name(), MessageID: m.ID,
			DequeueCount: m.DequeueCount, Worker: c.o.InstanceID}
		if c.setAsideAndDelete(hctx, d, rec) {
			c.settle(d, OutcomeMalformed)
		} else {
			c.settle(d, OutcomeLeft)
		}
		return
	}
	d.env, d.typ = env, env.Type
	d.log = d.log.With("task_id", env.ID, "type", env.Type, "attempt", env.FailedAttempts+1)
	if mutate.On(mutate.DropMessage) && strings.HasSuffix(env.ID, "7") {
		c.ack(hctx, d)
		c.settle(d, OutcomeSucceeded)
		return
	}
	// The delivery's span: a child of the schedule row's trace (an
	// occurrence of a series links to it); the handler's context carries it.
	hctx, d.span = tracing.StartTask(hctx, c.tracer, "leasecron.run", env.TraceParent, env.Series != "", trace.SpanKindConsumer,
		tracing.TaskAttrs(env.ID, env.Type, env.FailedAttempts+1, env.Series)...)
	defer d.span.End() // settle ends it; this covers any way out without an outcome
	d.maxA = c.o.MaxAttempts
	if env.MaxAttempts > 0 {
		d.maxA = env.MaxAttempts
	}
	if mutate.On(mutate.DieEarly) {
		d.maxA = 1
	}
	if mutate.On(mutate.NeverDie) {
		d.maxA = 1 << 20
	}
	// Its run ended, and only its batch or dependents have yet to hear.
	if env.Ended != "" {
		c.tellAgain(hctx, d)
		return
	}

	// Out of attempts already (an earlier set-aside failed, or MaxAttempts
	// was lowered): set aside without running.
	if env.FailedAttempts >= d.maxA {
		c.dead(hctx, d, env, fmt.Sprintf("used %d of %d attempts; last error: %s", env.FailedAttempts, d.maxA, env.LastError), nil, "")
		return
	}
	// Crash guard: deliveries with no recorded outcome count as attempts.
	unrecorded := m.DequeueCount - 1 - env.Dequeues
	if unrecorded > 0 && int64(env.FailedAttempts)+unrecorded >= int64(d.maxA+c.o.CrashMargin) {
		reason := fmt.Sprintf("delivered %d times without an outcome being recorded (a worker may be crashing on it); %d failed attempts recorded, last error: %s",
			unrecorded, env.FailedAttempts, env.LastError)
		c.dead(hctx, d, env, reason, nil, "")
		return
	}
	// No handler here: put it back without an attempt for a worker that
	// has one (worker pools share a queue only by mistake).
	if c.handler(env.Type) == nil {
		c.misrouted(hctx, d)
		return
	}
	// Its type, or its named queue, is paused fleet-wide: put it back
	// without an attempt.
	if c.heldByPause(hctx, d) {
		return
	}
	// Due further ahead than a message is held — the clocks of the host
	// that sent it and of this one are apart, or another program sent it
	// — it goes back until due: never early.
	if ahead := d.env.Due.Sub(c.clk.Now()); !d.env.Due.IsZero() && ahead > c.earlyLimit() && !mutate.On(mutate.EarlyStart) {
		c.deferMsg(hctx, d, ahead, "not due yet")
		return
	}
	// The same run already in flight on this worker (a second copy of the
	// message): put this copy back.
	if !c.track(env.ID) {
		c.deferMsg(hctx, d, c.deferDelay(d), "already running on this worker")
		return
	}
	defer c.untrack(env.ID)

	// Enqueued early (its delay rounded down to whole seconds): hold it
	// until due. A shutdown meanwhile puts it back for another worker.
	if hold, gone := c.untilDue(stop, hctx, d); gone {
		d.log.Info("a held message was taken by another worker; leaving it")
		c.settle(d, OutcomeLost)
		return
	} else if !hold {
		c.deferMsg(hctx, d, 0, "worker stopping before the task was due")
		return
	}
	// A wait until due ends by taking a handler slot again, which can take
	// long while every slot is busy: a pause begun meanwhile holds it too
	// (issue 38, seed 2949).
	if c.pauseBegunSince(hctx, d) {
		return
	}

	var limit Slot // the concurrency slot held, when it can be lost
	if c.o.Limiter != nil && !mutate.On(mutate.NoLimit) {
		release, sl, ok, err := c.acquireLimit(hctx, env.Type)
		if err != nil || !ok {
			if err != nil {
				d.log.Warn("limiter failed; putting the message back", "err", err)
			}
			c.deferMsg(hctx, d, c.deferDelay(d), "no limiter slot")
			return
		}
		if release != nil {
			defer release()
		}
		limit = sl
	}
	var rateAt time.Time // when the start was counted against its rate
	if c.o.Rates != nil && !mutate.On(mutate.NoRate) {
		var ok bool
		if rateAt, ok = c.takeRate(hctx, d, time.Time{}); !ok {
			return
		}
	}
	// A start counted for a handler that does not begin (put back for a
	// pause, refused by the run's claim) is taken out again: spent, it
	// held other tasks back for a start that never was.
	var began time.Time
	defer func() {
		if began.IsZero() {
			c.releaseRate(hctx, d, rateAt)
		}
	}()
	// So can a concurrency slot's slow answer.
	if c.pauseBegunSince(hctx, d) {
		return
	}
	if c.o.Runs != nil && !c.claim(hctx, d) {
		return
	}
	env = d.env // the claim may have counted the attempt on (claimAs)

	out := trunc.NewWriter(leasecrontype.MaxOutputTail)
	task := leasecrontype.Task{ID: env.ID, Series: env.Series, Type: env.Type, Due: env.Due, Attempt: env.FailedAttempts + 1,
		Generation: env.Generation, Batch: env.Batch, Completed: env.Completed}
	var herr error
	lost := false
	h := c.handler(env.Type)
	if h == nil {
		// Unregistered since the check above.
		herr = fmt.Errorf("%w %q", ErrNoHandler, env.Type)
	} else {
		task.Payload, herr = c.fetchPayload(hctx, env)
		if herr != nil && hctx.Err() == nil && payloadUnreachable(herr) {
			// The storage failing for now is not the task failing: the
			// message goes back without this attempt counted (issue 38,
			// the simulator's seed 115086: a dropped connection reading
			// the payload's blob killed a task of one attempt).
			d.log.Warn("fetching the payload failed; putting the message back without counting the attempt", "err", herr)
			c.deferMsg(hctx, d, c.deferDelay(d), "payload unreachable")
			return
		}
		if herr != nil && c.o.Runs == nil && env.Series == "" && errors.Is(herr, payload.ErrNotFound) {
			// Without run records nothing suppresses a second message of a
			// one-off task, and its blob goes once the task succeeded (or
			// with its row, cancelled as the mover sent it): a message whose
			// blob is gone is one of a task that is done, not one to fail
			// to its dead letter (a review's find).
			// Warned: a blob deleted by anything else (a lifecycle rule on
			// the container) drops its task here too.
			d.log.Warn("payload blob gone: without run records, taken for a second message of a task that succeeded or was cancelled as it was sent; acknowledging without running", "blob", env.PayloadBlob)
			c.ack(hctx, d)
			c.settle(d, OutcomeDuplicate)
			return
		}
	}
	// Whether the run is still this delivery's is checked first
	// (stillHeld), then the pause and the rate start (stillStarts), so
	// that those stay right before the handler. When either was slow —
	// the pause or rate answer past pauseRecheck, the rate start older
	// than rateFresh, or the claim last confirmed more than claimFresh
	// and pauseRecheck ago (a slow confirmation: a cancel may have marked
	// the run since it landed) — the round is made again (a review of
	// row 160's fix: else a start could be counted seconds before its
	// handler began, and more handlers than a rate allows begin within
	// its window; and of row 174's: checked in the other order, a claim
	// confirmed in a second or more was never fresh enough, and a table
	// that slow ran nothing). Three slow rounds put the message back, as
	// three late rate answers do.
	if herr == nil {
		lostBefore := false
		for round := 1; ; round++ {
			held, lost := c.stillHeld(hctx, d)
			if !held {
				return
			}
			lostBefore = lostBefore || lost
			asked := c.clk.Now()
			if !c.stillStarts(hctx, d, &rateAt) {
				return
			}
			now := c.clk.Now()
			if now.Sub(asked) <= pauseRecheck && (rateAt.IsZero() || now.Sub(rateAt) <= rateFresh) &&
				(!d.claimed || now.Sub(d.claimAt) <= claimFresh+pauseRecheck) {
				break
			}
			if round == 3 {
				d.log.Warn("the checks before the handler answered late three times; putting the message back")
				c.putBackUnstarted(hctx, d, lostBefore, "storage slow before the handler")
				return
			}
			d.log.Info("the run's check before its handler answered late; checking the pause and the rate start again")
		}
		lost = lostBefore
		// The concurrency slot, taken before the claim and the checks,
		// may have been lost since (its lease not renewed in time: a
		// process paused past it, or storage failing), and taken by
		// another worker: the handler does not begin on it (issue 38,
		// the simulator's seed 140173: a worker frozen for a minute with
		// two slots taken began both handlers once it ran again, beside
		// two more on the same slots taken afresh).
		if limit != nil && !limit.Held() {
			d.log.Warn("the concurrency slot was lost before the handler began (its lease not renewed in time); putting the message back")
			c.putBackUnstarted(hctx, d, lost, "concurrency slot lost")
			return
		}
	}
	if herr == nil {
		began = c.clk.Now()
		herr, lost = c.runHandler(hctx, d, h, task, out, lost, limit)
		c.timed(env, task.Attempt, began)
	}
	tail := trunc.Tail(joinOutput(out.String(), leasecrontype.OutputOf(herr)), leasecrontype.MaxOutputTail)
	c.handOff(d)

	delay, snoozed := leasecrontype.SnoozeOf(herr)
	switch {
	case herr != nil && hctx.Err() != nil && !errors.Is(herr, ErrHandlerTimeout):
		// Cancelled by shutdown: handed back, no attempt used, whether or
		// not its message's visibility was lost meanwhile (issue 38, the
		// simulator's seed 6704: counted as a failure, a task of one
		// attempt died when its message reappeared).
		c.abandon(d, tail, lost, "worker shut down before the task finished")
	case herr != nil && errors.Is(herr, ErrSlotLost):
		// Cut short for want of its slot, not failed: handed back, the
		// attempt not counted, to run again once a slot is free.
		c.abandon(d, tail, lost, "its concurrency slot was lost while it ran")
	case lost:
		d.log.Warn("message visibility was lost while the handler ran; recording the result and leaving the message to reappear", "err", herr)
		if herr == nil {
			movedOn, ferr := c.finish(hctx, d, leasecrontype.RunSucceeded, nil, tail)
			c.stats.add(d.typ, func(x *leasecrontype.Counts) { x.Handled++ })
			// Its children and its batch hear of the end now (again when
			// the message reappears: applying an end is idempotent). By
			// then the id may have been scheduled again, its record taken
			// by that run, and the reappearing message unable to tell that
			// this one succeeded (issue 38, the simulator's seed 23). The
			// message cannot carry an end that could not be told: a
			// recorded one goes in a message of its own (one the run
			// record does not hold is left to the message's return, which
			// runs the task again; one another delivery ended, to it).
			if !c.ended(hctx, d, leasecrontype.RunSucceeded) && ferr == nil && movedOn == nil {
				c.sendEnd(hctx, d, leasecrontype.RunSucceeded)
			}
		} else if snoozed {
			// A snooze uses no attempt: recorded as a failure, a task of
			// one attempt died when its message reappeared (issue 38, the
			// simulator's seed 7134). The message cannot be hidden for
			// the snooze; it comes back after its visibility timeout, as
			// when a snooze's rewrite fails.
			d.log.Warn("the handler snoozed, but its message's visibility was lost: it reappears after its visibility timeout without the snooze", "asked", delay)
			c.forgetClaim(d)
		} else {
			c.finish(hctx, d, leasecrontype.RunFailed, herr, tail)
			c.stats.add(d.typ, func(x *leasecrontype.Counts) { x.Failed++ })
		}
		c.settle(d, OutcomeLost)
	case snoozed:
		c.snooze(hctx, d, delay, tail)
	case herr == nil:
		c.succeed(hctx, d, tail)
	default:
		c.fail(hctx, d, herr, tail)
	}
}

// stillStarts reports whether a claimed delivery goes on to its handler
// after its claim and its payload read, either of which can take seconds
// through failing storage: a pause begun meanwhile holds it, and a start
// counted against its rate (at rateAt) long before is moved to now, as
// takeRate moves a late one, so that the window counts the handler's
// start; refused, either puts the message back and gives the claim back
// (handBack). Issue 38, the simulator's seed 8456: a claim seven seconds
// slow, and four starts of a rate of three in ten seconds.
func (c *Consumer) stillStarts(hctx context.Context, d *delivery, rateAt *time.Time) bool {
	if c.pauseBegunSince(hctx, d) {
		return false
	}
	if rateAt.IsZero() || c.clk.Now().Sub(*rateAt) <= rateFresh {
		return true
	}
	d.log.Info("the run's claim answered late; moving its rate start to now", "took", c.clk.Now().Sub(*rateAt).Round(time.Millisecond))
	at, ok := c.takeRate(hctx, d, *rateAt)
	*rateAt = at // (zero when refused: takeRate took it out)
	return ok
}

// stillHeld reports whether a delivery slowed on its way to its handler
// still holds its run: one whose message has been invisible for two
// thirds of VisibilityTimeout or more (its claim, payload read, pause
// check or rate move retried through failing storage, or the process
// stopped meanwhile) may have let its message reappear and its claim
// lapse, and another worker may have taken the run over and begun it. Such a delivery extends its message
// and its claim before the handler begins, not beside it, and runs only
// when its claim is confirmed its own (a delivery without a claim: unless
// its message is known gone). Otherwise it settles without running: the
// message put back when it still holds it, left to the worker that
// received it again when gone, and left to reappear when its extension
// failed otherwise (issue 38, the simulator's seed 87398: a worker
// stopped for a minute between its claim and its handler began the task
// 1.8 s after another worker had). lost reports that the message is
// gone (with held, the claim held: the handler runs, its claim extended
// alone, as when an extension finds the message gone while it runs). A
// claim made or confirmed more than claimFresh ago is confirmed too (its
// expiry unchanged when the message needs no extension): a cancel that
// marked the run meanwhile keeps its handler from beginning. A delivery
// on time does nothing here: its handler's first extension comes while
// it runs.
func (c *Consumer) stillHeld(hctx context.Context, d *delivery) (held, lost bool) {
	vis := c.o.VisibilityTimeout
	now := c.clk.Now()
	extendMsg := now.Sub(d.visSince) >= vis*2/3
	if !extendMsg && !(d.claimed && now.Sub(d.claimAt) >= claimFresh) {
		return true, false
	}
	var err error
	until := d.claimUntil // a claim only confirmed keeps its expiry
	if extendMsg {
		ctx, cancel := c.opCtx(hctx)
		var m Message
		m, err = c.work.Update(ctx, d.m, d.m.Text, vis)
		cancel()
		switch {
		case err == nil:
			d.m, d.visSince = m, now
		case errors.Is(err, ErrMessageGone):
			lost = true
		default:
			d.log.Warn("extending visibility before the handler failed", "err", err)
		}
		if c.hooks.extended != nil {
			c.hooks.extended(d.env.ID, err)
		}
		until = now.Add(vis)
	}
	if !d.claimed {
		if lost {
			d.log.Warn("message received by another worker while this delivery was on its way to its handler; leaving it to that worker", "waited", now.Sub(d.start))
			c.settle(d, OutcomeLost)
			return false, lost
		}
		return true, false
	}
	var answer error // the claim is another's: not tried again
	cerr := c.transient(hctx, 0, func(ctx context.Context) error {
		err := c.o.Runs.Extend(ctx, d.env.ID, c.o.InstanceID, until)
		if errors.Is(err, leasecrontype.ErrClaimLost) {
			answer, err = err, nil
		}
		return err
	})
	if answer != nil {
		cerr = answer
	}
	switch {
	case cerr == nil:
		if lost {
			d.visSince = now // the claim was extended: the next is due two thirds on
		}
		d.claimAt, d.claimUntil = now, until
		return true, lost
	case errors.Is(cerr, leasecrontype.ErrClaimLost):
		// Another delivery has the run: its claim is not to be given back.
		d.log.Warn("the run is no longer this delivery's (taken over, or cancelled) while it was on its way to its handler; not running it", "waited", now.Sub(d.start))
		c.forgetClaim(d)
		d.claimed = false
	default:
		// Whether the claim still holds is not known: run it only once it
		// is (as when a claim cannot be recorded), giving the claim back
		// if it still is this delivery's.
		d.log.Warn("cannot confirm the run's claim before its handler; not running it now", "err", cerr)
		c.handBack(hctx, d)
	}
	switch {
	case lost:
		c.settle(d, OutcomeLost)
	case err == nil:
		env := d.env
		env.Dequeues = d.m.DequeueCount
		c.putBack(hctx, d, env, c.deferDelay(d), "run's claim not this delivery's")
	default:
		c.settle(d, OutcomeLeft)
	}
	return false, lost
}

// releaseRate takes the start d recorded against its rate at (zero:
// none) out of the window, for a delivery put back before its handler
// began, so that the start is not spent (rateMover; with any other
// limiter it stays counted). It is best effort: a failure leaves the
// start counted, which only spends budget.
func (c *Consumer) releaseRate(hctx context.Context, d *delivery, at time.Time) {
	rm, ok := c.o.Rates.(rateMover)
	if !ok || at.IsZero() {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := rm.ReleaseStart(ctx, d.env, at); err != nil {
		d.log.Debug("taking back a rate start failed; it stays counted", "err", err)
	}
}

// claimFresh bounds how long before its handler begins a delivery's claim
// was last made or confirmed: past it, the claim is confirmed first
// (stillHeld), one request more, so that a run a cancel marked after a
// slowed delivery claimed it does not begin seconds after the cancel
// answered (issue 38, sweep seed 95331: a rated task claimed under
// failing storage began 7 s after `cancel` answered that it marked it).
const claimFresh = time.Second

// rateFresh bounds how long before the claim a delivery's start may have
// been recorded against its rate limit: within the second each window is
// widened by (rate.DefaultMargin), with room for the claim.
const rateFresh = 500 * time.Millisecond

// takeRate takes a start from d's rate budget and says when it was
// counted (zero when the type has no rate), or puts d back (false) until
// the budget frees, handing back the run's claim first if d holds one.
// With from set, the start d counted then is moved to now instead
// (rateMover; a limiter that cannot move one is asked for another start,
// and the first stays counted). A start recorded more than rateFresh
// before the take (and the pause check after it) answered — its write,
// or that check, slowed by failing storage — is one the handler would
// begin long after, which the window does not allow for: it is moved
// again, so that it counts from now.
func (c *Consumer) takeRate(hctx context.Context, d *delivery, from time.Time) (time.Time, bool) {
	rs, starter := c.o.Rates.(rateStarter)
	rm, mover := c.o.Rates.(rateMover)
	for try := 1; ; try++ {
		at := c.clk.Now()
		var wait time.Duration
		var err error
		switch {
		case mover && !from.IsZero():
			wait, at, err = rm.MoveStart(hctx, d.env, from)
		case starter:
			wait, at, err = rs.TakeStart(hctx, d.env)
		default:
			wait, err = c.o.Rates.Take(hctx, d.env)
		}
		switch {
		case err != nil:
			d.log.Warn("rate limit not checked; putting the message back", "err", err)
			c.releaseRate(hctx, d, from) // (a move that failed may have left it)
			c.deferMsg(hctx, d, c.deferDelay(d), "rate limit not checked")
			return time.Time{}, false
		case wait > 0:
			d.log.Debug("over its rate; putting the message back until the budget frees", "retry_in", wait.Round(time.Millisecond))
			if !c.handBack(hctx, d) {
				// (A run handed back as at shutdown stays queued, which a
				// series' cancel or disable still reaches: noted waiting
				// with its attempt it would look started to them.)
				c.noteWaiting(hctx, d, wait, "waiting for the rate limit of "+d.env.Type)
			}
			c.deferMsg(hctx, d, wait, "rate limit: waiting for the budget")
			return time.Time{}, false
		}
		// So can the rate budget's slow answer.
		if c.pauseBegunSince(hctx, d) {
			c.releaseRate(hctx, d, at)
			return time.Time{}, false
		}
		if at.IsZero() {
			return at, true // no rate for the type: nothing recorded
		}
		took := c.clk.Now().Sub(at)
		switch {
		case took <= rateFresh:
			return at, true
		case try == 3:
			d.log.Warn("the rate budget answered late three times; putting the message back", "took", took.Round(time.Millisecond))
			c.releaseRate(hctx, d, at)
			c.deferMsg(hctx, d, c.deferDelay(d), "rate limit: storage slow")
			return time.Time{}, false
		}
		d.log.Info("the rate budget answered late; moving the start to now", "took", took.Round(time.Millisecond))
		from = at
	}
}

// heldByPause puts d back without an attempt, and reports true, when its
// type or its named queue is paused fleet-wide.
func (c *Consumer) heldByPause(hctx context.Context, d *delivery) bool {
	d.pauseAt = c.clk.Now()
	for _, key := range []string{d.env.Type, QueuePauseKey(d.env.Queue)} {
		if until, paused := c.pausedUntil(hctx, key); paused && !mutate.On(mutate.IgnorePause) {
			c.holdPaused(hctx, d, key, until)
			return true
		}
	}
	return false
}

// pauseRecheck is how long after its pause check a delivery may go on to
// its claim on that check.
const pauseRecheck = 500 * time.Millisecond

// pauseBegunSince is heldByPause for a delivery whose pause was checked
// more than pauseRecheck ago (it waited for a handler slot, a concurrency
// slot or its rate budget): the check is made again before the claim, so
// a pause begun meanwhile holds it. The state read is trusted for
// PauseCheck, as at every check.
func (c *Consumer) pauseBegunSince(hctx context.Context, d *delivery) bool {
	return c.clk.Now().Sub(d.pauseAt) > pauseRecheck && c.heldByPause(hctx, d)
}

// handOff gives a delivery's handler slot back once its handler has
// returned, so that recording the outcome — with run records on, a table
// transaction and then the message's delete, two round trips — does not keep
// the next message's handler waiting. The delivery takes a settling token
// first: at most Concurrency deliveries record outcomes at once, so a slow
// store holds handlers back (their slots stay taken) instead of letting
// finished messages pile up.
func (c *Consumer) handOff(d *delivery) {
	if d.slot == nil || !d.slot.held {
		return
	}
	c.settling <- struct{}{}
	d.slot.settling = true
	<-c.slots
	d.slot.held = false
}

func joinOutput(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

func (c *Consumer) track(id string) bool {
	c.imu.Lock()
	defer c.imu.Unlock()
	if c.inFlight[id] {
		return false
	}
	c.inFlight[id] = true
	return true
}

func (c *Consumer) untrack(id string) {
	c.imu.Lock()
	defer c.imu.Unlock()
	delete(c.inFlight, id)
}

// claim records the claim in Runs; it returns false when the message was
// settled without running. A Runs outage delays the task: its message is
// put back until the claim can be recorded.
func (c *Consumer) claim(hctx context.Context, d *delivery) bool {
	return c.claimAs(hctx, d, d.env.runMeta(), true)
}

// refusal reports whether a claim's error is an answer (the run must not
// run now), not a failure to read or write the claim.
func refusal(err error) bool {
	return errors.Is(err, leasecrontype.ErrRunSucceeded) || errors.Is(err, leasecrontype.ErrRunCancelled) ||
		errors.Is(err, leasecrontype.ErrRunUnconfirmed) || errors.Is(err, leasecrontype.ErrRunClaimed) ||
		errors.Is(err, leasecrontype.ErrRunDead)
}

// claimAs claims with m; check says whether a refusal as unconfirmed
// (an early-sent message) may still be resolved by checking the task's row.
func (c *Consumer) claimAs(hctx context.Context, d *delivery, m leasecrontype.RunMeta, check bool) bool {
	now := c.clk.Now()
	var r leasecrontype.Run
	// A short fault is tried again within seconds: a task run without its
	// claim runs unrecorded, and its outcome then lands on whatever record
	// the id has (an earlier task's).
	var answer error // a refusal: not tried again
	d.claimAt, d.claimUntil = now, now.Add(c.o.VisibilityTimeout)
	err := c.transient(hctx, 0, func(ctx context.Context) error {
		var cerr error
		r, cerr = c.o.Runs.Claim(ctx, d.env.ID, c.o.InstanceID, d.env.FailedAttempts+1, d.claimUntil, m)
		if refusal(cerr) {
			answer, cerr = cerr, nil
		}
		return cerr
	})
	if answer != nil {
		err = answer
	}
	switch {
	case err == nil && r.Attempts > d.env.FailedAttempts+1:
		// The record has counted attempts this message has not seen (a
		// second message of the run, or one whose own count was not
		// updated): this attempt is the record's.
		d.claimed = true
		d.env.FailedAttempts = r.Attempts - 1
		d.log = d.log.With("attempt", r.Attempts)
		if r.Attempts > d.maxA {
			c.dead(hctx, d, d.env, fmt.Sprintf("used %d of %d attempts; last error: %s", d.env.FailedAttempts, d.maxA, r.LastError), nil, "")
			return false
		}
		return true
	case err == nil:
		d.claimed = true
		return true
	case (errors.Is(err, leasecrontype.ErrRunDead) || errors.Is(err, leasecrontype.ErrRunSucceeded)) &&
		!d.env.Due.IsZero() && !r.OfDue(d.env.Due):
		// A second message of a run that ended before another
		// scheduling of its id took the record over (issue 38, seed
		// 17525): told now, its end would be taken for the other
		// scheduling's, releasing what waits for that one. But one that
		// says others wait for the run may be the only message that does
		// (a child marked the row after the run's first message was
		// sent, and the mover sent the row again): the traffic cop then
		// watches the id, and what waits hears of the end it comes to.
		if d.env.Waiters && !c.watchID(hctx, d) {
			c.deferMsg(hctx, d, c.deferDelay(d), "the watch of its id is still to be made")
			return false
		}
		// Its batch hears of the end again: the run's worker may have died
		// before telling it, and this message may be the last of the run
		// (issue 38, seed 90112: an early-sent member's message came back
		// after a replace took the record over, and was acknowledged
		// untold; the callback waited for good). A batch counts a member's
		// end once.
		if !c.tellBatch(hctx, d, endOf(err)) {
			c.deferMsg(hctx, d, c.deferDelay(d), "its end is still to be told")
			return false
		}
		return c.ackUnrun(hctx, d, OutcomeDuplicate, "run of this due time already ended and its id was scheduled again since; acknowledging a second message of it")
	case errors.Is(err, leasecrontype.ErrRunDead):
		// The run's death may be this very message's, back unmarked (its
		// worker could mark it used up neither before nor after a telling
		// that failed): its batch and dependents hear of it again first
		// (a review of issue 38's row 80). A requeued run (the record
		// queued for its requeue's message) has nothing to tell its batch;
		// but a message that says others wait for it may be the only one
		// that says so: a child marked the run's row after its first message
		// was sent, the mover sent the row again, and the run died before
		// that second message came (issue 38, seed 70823: the dead letter
		// was requeued in between, the second message acknowledged
		// untold, and the child waited for good); OnEnd then sees to it
		// that the requeued run's end reaches them.
		if (r.State == leasecrontype.RunDead || d.env.Waiters) && !c.ended(hctx, d, leasecrontype.RunDead) {
			// Put back, its deliveries counted: left as it was, each would
			// count towards the crash guard, whose set-aside tells nothing
			// of a requeued run. (Not carrying the death: the record may
			// say otherwise by the time it comes back.)
			c.deferMsg(hctx, d, c.deferDelay(d), "its end is still to be told")
			return false
		}
		return c.ackUnrun(hctx, d, OutcomeDuplicate, "run already dead; acknowledging a second message of it")
	case errors.Is(err, leasecrontype.ErrRunSucceeded):
		if !c.ended(hctx, d, leasecrontype.RunSucceeded) {
			c.carryEnd(hctx, d, leasecrontype.RunSucceeded)
			c.settle(d, OutcomeDuplicate)
			return false
		}
		// The worker that succeeded may have left the payload blob (it
		// died, or lost the message, before its deletion): nothing needs
		// it now, whether or not this message can be deleted.
		c.deletePayload(hctx, d)
		return c.ackUnrun(hctx, d, OutcomeDuplicate, "run already succeeded; acknowledging a duplicate delivery")
	case errors.Is(err, leasecrontype.ErrRunCancelled):
		d.log.Info("run was cancelled; acknowledging without running")
		if !c.ended(hctx, d, leasecrontype.RunCancelled) {
			c.carryEnd(hctx, d, leasecrontype.RunCancelled)
		} else if c.ack(hctx, d) {
			c.deletePayload(hctx, d)
		}
		c.settle(d, OutcomeCancelled)
		return false
	case errors.Is(err, leasecrontype.ErrRunUnconfirmed) && check:
		m.RowCheckedOver = r.Version
		return c.claimUnconfirmed(hctx, d, m)
	case errors.Is(err, leasecrontype.ErrRunUnconfirmed):
		c.dropBehind(hctx, d)
		return c.ackUnrun(hctx, d, OutcomeSuperseded, "task changed since its message was sent early; acknowledging without running")
	case errors.Is(err, leasecrontype.ErrRunClaimed):
		wait := r.ClaimUntil.Sub(now)
		wait = min(max(wait, c.o.BackoffBase), c.o.VisibilityTimeout)
		wait += time.Duration(float64(c.o.BackoffBase) * c.o.rand())
		c.deferMsg(hctx, d, wait, "claimed by "+r.Worker)
		return false
	case hctx.Err() != nil:
		// Shutdown cut the claim short: hand the message back unrun.
		c.deferMsg(hctx, d, 0, "worker stopping before the run was claimed")
		return false
	case claimUnanswered(err):
		// The run records did not answer, within the retries above: the
		// claim is what says whether the run still stands (cancelled after
		// the move, its series disabled, an early-sent message made stale)
		// and that no other worker runs it, so run it only once that is
		// known. The message comes back, without an attempt, after a
		// wait that grows each time (issue 38, the simulator's seed 7728:
		// a disabled series' early-sent occurrence ran through an outage).
		d.log.Warn("cannot record the run's claim; putting the message back", "err", err)
		c.deferMsg(hctx, d, c.deferDelay(d), "claim not recorded")
		return false
	default:
		// A claim that can never be made for this message (an id the
		// records cannot hold, a request the store rejects): at least once
		// beats exactly once, and waiting would not help.
		d.log.Warn("run claim failed; running anyway", "err", err)
		return true
	}
}

// claimUnanswered reports whether a claim's error says that the run
// records did not answer (a fault that passes: the service busy, a
// timeout, a connection lost, a record changing under the claim) rather
// than that this claim cannot be made (RunRecorder: an id the records
// cannot hold, or the store refusing the request).
func claimUnanswered(err error) bool {
	return storage.IsTransient(err) && !errors.Is(err, runs.ErrInvalid)
}

// runHandler calls h with the task, extending the message's visibility
// until it returns. lost reports that an extension found the message gone
// (or its receipt stale): the message must then not be touched again;
// lost given true (stillHeld found it so) extends the run's claim alone.
func (c *Consumer) runHandler(hctx context.Context, d *delivery, h leasecrontype.Handler, task leasecrontype.Task, out *trunc.Writer, lost bool, limit Slot) (herr error, _ bool) {
	timeout := c.o.HandlerTimeout
	if t, ok := c.o.HandlerTimeouts[task.Type]; ok {
		timeout = min(t, c.o.MaxRunTime)
	}
	hctxOut := leasecrontype.WithOutputWriter(hctx, out)
	if pw := c.newProgress(hctx, d); pw != nil {
		hctxOut = leasecrontype.WithProgressFunc(hctxOut, pw.report)
		defer pw.end()
	}
	rctx, cancel := context.WithCancelCause(hctxOut)
	defer cancel(nil)
	started := c.clk.Now()
	vis := c.o.VisibilityTimeout
	deadline := c.clk.NewTimer(timeout)
	defer deadline.Stop()
	// The first extension counts from when the visibility was last set,
	// not from now: a delivery slowed before its handler (its claim, its
	// pause check or rate move retried through failing storage) would
	// otherwise let its message reappear, and its claim lapse, while the
	// handler runs (issue 38, the simulator's seed 8680: a handler that
	// began twelve seconds after its claim, and a second worker ran it
	// too).
	ext := c.clk.NewTimer(max(0, vis*2/3-started.Sub(d.visSince)))
	defer func() { ext.Stop() }()
	done := make(chan error, 1)
	if c.hooks.started != nil {
		c.hooks.started(task.ID)
	}
	go func() { done <- call(rctx, h, task) }()
	var slotGone <-chan struct{} // nil (never ready) without a slot
	if limit != nil {
		slotGone = limit.Context().Done()
	}
	timedOut, slotLost := false, false
	extending := true
	for {
		select {
		case err := <-done:
			switch {
			case timedOut && err != nil:
				err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, timeout, err)
			case slotLost && err != nil:
				err = fmt.Errorf("%w: %w", ErrSlotLost, err)
			}
			return err, lost
		case <-slotGone:
			slotGone = nil
			select {
			case err := <-done:
				// It had ended as the slot went: its end stands (the
				// next round takes it), not a cancellation that did not
				// happen.
				done <- err
				continue
			default:
			}
			if !timedOut {
				slotLost = true
				d.log.Warn("the concurrency slot was lost while the handler ran (its lease not renewed in time); cancelling the handler")
				cancel(ErrSlotLost)
			}
		case <-deadline.C():
			if slotLost {
				// Cancelled already, for its slot: the attempt is not the
				// handler's to lose (a review's find: counted a failure,
				// or not, by what the handler returned).
				continue
			}
			timedOut = true
			d.log.Warn("handler timed out; cancelling it", "timeout", timeout)
			cancel(ErrHandlerTimeout)
		case <-ext.C():
			if !extending {
				continue
			}
			if c.clk.Now().Sub(started) > c.o.MaxRunTime+vis {
				d.log.Error("handler ignores cancellation; no longer extending its message", "running_for", c.clk.Now().Sub(started))
				extending = false
				continue
			}
			next := vis * 2 / 3
			ctx, cancelOp := c.opCtx(hctx)
			var err error
			if lost {
				// The message is gone or redelivered, but the handler
				// runs on: its run claim still keeps a second delivery
				// from running it at the same time (issue 38, seeds 1026,
				// 1076: the claim lapsed and another worker ran it too).
				c.extendClaim(ctx, d, vis)
			} else {
				var m Message
				m, err = c.work.Update(ctx, d.m, d.m.Text, vis)
				switch {
				case err == nil:
					d.m = m
					c.extendClaim(ctx, d, vis)
				case errors.Is(err, ErrMessageGone):
					d.log.Warn("cannot extend visibility: message gone or redelivered; extending the run claim only", "err", err)
					lost = true
					c.extendClaim(ctx, d, vis)
				default:
					next = min(vis/6, 5*time.Second)
					d.log.Warn("extending visibility failed; retrying", "err", err, "retry_in", next)
				}
			}
			cancelOp()
			// The next extension is armed before the hook reports this
			// one, so a test that advances its clock on the report finds
			// the timer already set.
			if extending {
				ext = c.clk.NewTimer(next)
			}
			if c.hooks.extended != nil {
				c.hooks.extended(d.env.ID, err)
			}
		}
	}
}

// extendClaim moves d's run claim (when it holds one) vis ahead.
func (c *Consumer) extendClaim(ctx context.Context, d *delivery, vis time.Duration) {
	if !d.claimed {
		return
	}
	switch err := c.o.Runs.Extend(ctx, d.env.ID, c.o.InstanceID, c.clk.Now().Add(vis)); {
	case errors.Is(err, leasecrontype.ErrClaimLost):
		d.log.Warn("the run's claim is no longer this worker's (taken over after it lapsed, or the run cancelled or ended meanwhile); the handler runs on", "err", err)
	case err != nil:
		d.log.Debug("extending the run claim failed", "err", err)
	}
}

// call runs h, turning a panic into ErrPanic.
func call(ctx context.Context, h leasecrontype.Handler, t leasecrontype.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := string(debug.Stack())
			err = leasecrontype.WithOutput(fmt.Errorf("%w: %v", ErrPanic, r), stack)
		}
	}()
	return h(ctx, t)
}

// payloadUnreachable reports whether err, fetching a payload's blob, is
// the storage failing for now (a timeout, a dropped connection,
// throttling, a server error), not the blob missing, a reference this
// store does not hand out, a blob too large or no store: those fail the
// attempt.
func payloadUnreachable(err error) bool {
	return !errors.Is(err, payload.ErrNotFound) && !errors.Is(err, payload.ErrBadRef) && !errors.Is(err, payload.ErrTooLarge) &&
		!errors.Is(err, ErrNoPayloadStore) && storage.IsTransient(err)
}

func (c *Consumer) fetchPayload(hctx context.Context, env Envelope) ([]byte, error) {
	if env.PayloadBlob == "" {
		return []byte(env.Payload), nil
	}
	if c.o.Payloads == nil {
		return nil, fmt.Errorf("%w (blob %s)", ErrNoPayloadStore, env.PayloadBlob)
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	b, err := c.o.Payloads.Get(ctx, env.PayloadBlob)
	if err != nil {
		return nil, fmt.Errorf("fetch payload %s: %w", env.PayloadBlob, err)
	}
	return b, nil
}

// claimUnconfirmed settles the first delivery of a message sent early whose
// run record does not carry its token: the task's row decides. If the row
// still carries the token (the leader died before moving it, or has not
// moved it yet) the run is claimed without the token. If not, the record is
// asked once more (the mover confirms a run before it removes its row); a
// run still unconfirmed then is stale and acknowledged without running. When
// the row cannot be read the message is put back for a later look: late,
// never run against a cancel.
func (c *Consumer) claimUnconfirmed(hctx context.Context, d *delivery, m leasecrontype.RunMeta) bool {
	current := c.o.Current == nil
	if !current {
		err := c.transient(hctx, 3, func(ctx context.Context) error {
			var cerr error
			current, cerr = c.o.Current(ctx, d.env)
			return cerr
		})
		if err != nil {
			d.log.Warn("cannot check an early-sent message against its task; putting it back", "err", err)
			c.deferMsg(hctx, d, c.o.BackoffBase, "early-sent message not checked")
			return false
		}
	}
	d.log.Debug("early-sent message checked against its task's row", "current", current, "row", d.env.Row)
	if current {
		m.Token, m.RowChecked = "", true // the row still stands for it: claim as any other
		d.rowChecked = true
	} else {
		m.RowGone, m.RowCheckedOver = true, "" // an end the record keeps for its due time is its own
	}
	return c.claimAs(hctx, d, m, false)
}

// ended tells OnEnd that d's run ended in st, when its end matters
// (Envelope.Ends); it reports whether the message may be deleted: false
// when OnEnd failed, and the message must reappear to try again.
func (c *Consumer) ended(hctx context.Context, d *delivery, st leasecrontype.RunState) bool {
	return c.tellEnd(hctx, d, d.env, st)
}

// tellEnd is ended for env, d's envelope or a copy of it.
func (c *Consumer) tellEnd(hctx context.Context, d *delivery, env Envelope, st leasecrontype.RunState) bool {
	if c.o.OnEnd == nil || !env.Ends() {
		return true
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.o.OnEnd(ctx, env, st); err != nil {
		d.log.Warn("recording the end of the run for its batch or dependents failed; the message reappears to try again", "state", st, "err", err)
		return false
	}
	return true
}

// tellBatch tells OnEnd that d's run ended in st when d's message names a
// batch that has not completed, and not what waits for its id (the
// record is another scheduling's by now, and what waits for the id waits
// for that one: watchID). It reports whether the message may be deleted.
func (c *Consumer) tellBatch(hctx context.Context, d *delivery, st leasecrontype.RunState) bool {
	env := d.env
	env.Waiters = false
	return c.tellEnd(hctx, d, env, st)
}

// endOf is the end a claim's refusal as already succeeded or dead says
// the run came to.
func endOf(err error) leasecrontype.RunState {
	if errors.Is(err, leasecrontype.ErrRunDead) {
		return leasecrontype.RunDead
	}
	return leasecrontype.RunSucceeded
}

// carryEnd puts d's message back with its run's end in it
// (Envelope.Ended), after OnEnd failed for an end the run record holds
// (succeeded or cancelled): by the time the message reappears the id may
// have been scheduled again, and its record no longer say how this run
// ended. Not for an end the record may not hold (its write failed: the
// message must then run the task again), nor for a message whose
// visibility was lost (it cannot be rewritten).
func (c *Consumer) carryEnd(hctx context.Context, d *delivery, st leasecrontype.RunState) {
	if d.env.Ended != "" {
		return
	}
	env := d.env
	env.Ended = st
	env.Dequeues = d.m.DequeueCount
	if c.rewrite(hctx, d, env, c.deferDelay(d)) {
		d.env = env
		return
	}
	c.sendEnd(hctx, d, st)
}

// sendEnd sends d's run's end (st), which its batch or dependents could
// not be told, in a message of its own, when d's message cannot carry it
// (its visibility was lost while the handler ran, or rewriting it
// failed): that message only tells them (tellAgain), whatever the run
// record says by then. Without it the end rested on d's message coming
// back while the record still held it; once the id was scheduled again
// the message was acknowledged as stale, and the batch never heard
// (issue 38, the simulator's seed 13604: a batch member scheduled again
// while it ran; the batch's callback never ran). Telling twice changes
// nothing. It goes where the run's route sends it (the client's Enqueue),
// marked EndOnly: telling it leaves the payload blob, which d's message
// still names. A worker of an earlier release, which knows neither field,
// takes it for one more delivery of the run, as it would d's message
// back. A failure is logged.
func (c *Consumer) sendEnd(hctx context.Context, d *delivery, st leasecrontype.RunState) {
	env := d.env
	env.Ended, env.EndOnly, env.Dequeues = st, true, 0
	err := c.transient(hctx, 0, func(ctx context.Context) error { return c.client.Enqueue(ctx, env, 0) })
	if err != nil {
		d.log.Warn("cannot send the run's end in a message of its own; its batch or dependents may not hear of it", "state", st, "err", err)
		return
	}
	d.log.Info("the run's end goes to its batch or dependents in a message of its own", "state", st)
}

// tellAgain tells the batch and dependents of a run that ended
// (Envelope.Ended) and acknowledges its message; it is put back to try
// again when the telling fails.
func (c *Consumer) tellAgain(hctx context.Context, d *delivery) {
	d.log.Info("telling the batch or dependents of the run's end again", "state", d.env.Ended)
	if !c.ended(hctx, d, d.env.Ended) {
		c.deferMsg(hctx, d, c.deferDelay(d), "its end is still to be told")
		return
	}
	// A succeeded run's blob goes whether or not the message's deletion
	// answered (row 196): one whose answer was lost finds the message
	// gone, and nothing comes back to delete the blob (row 243).
	if c.ack(hctx, d) || d.env.Ended == leasecrontype.RunSucceeded {
		c.deletePayload(hctx, d)
	}
	c.settle(d, OutcomeDuplicate)
}

// watchID has the traffic cop watch d's id (ParentWatcher); it reports
// whether the message may go: false when the watch failed with a fault
// that passes. One the service would refuse again is logged, and the
// message goes all the same.
func (c *Consumer) watchID(hctx context.Context, d *delivery) bool {
	pw, ok := c.o.Runs.(ParentWatcher)
	if !ok {
		return true
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	switch err := pw.WatchParents(ctx, []string{d.env.ID}); {
	case err == nil:
	case storage.IsTransient(err) || ctx.Err() != nil:
		d.log.Warn("cannot have the traffic cop watch a run others wait for; the message reappears to try again", "err", err)
		return false
	default:
		d.log.Error("cannot have the traffic cop watch a run others wait for; acknowledging its message all the same", "err", err)
	}
	return true
}

// tellMovedOn tells OnEnd how d's run stands, when its claim lapsed (or
// it held none) and the run has moved on since — another delivery ended
// it or holds it, or a requeue brought it back (r) — and d's message says
// others wait for the run (Envelope.Waiters): it may be the only message
// that says so (a child marked the row after the run's first message was
// sent, and the mover sent the row again), and the delivery that moved
// the run on may tell them nothing. For a record not finished the id is
// watched instead (ParentWatcher): an end made up for it could be taken,
// by the time it is told, for another scheduling's. It reports whether the message
// may be acknowledged; when the telling fails, the message is put back
// as env, its deliveries counted, and settled. (Not carrying the end:
// made up for a run not finished, or the record's before the id was
// scheduled again, it would be told as it was when the message comes
// back, and its telling would delete the payload the run still needs.)
func (c *Consumer) tellMovedOn(hctx context.Context, d *delivery, r leasecrontype.Run, env Envelope) bool {
	if !d.env.Waiters {
		return true
	}
	if r.State.Finished() && c.ended(hctx, d, r.State) || !r.State.Finished() && c.watchID(hctx, d) {
		return true
	}
	env.Dequeues = d.m.DequeueCount
	c.putBack(hctx, d, env, c.deferDelay(d), "how its run stands is still to be told")
	return false
}

// dropBehind takes a superseded delivery's due time off the schedulings
// its run record keeps as moved beside another run (BehindDropper): what
// waits for the id would otherwise wait for it (issue 38, seed 4499). A
// failure is logged; the record's bound on those entries remains.
func (c *Consumer) dropBehind(hctx context.Context, d *delivery) {
	bd, ok := c.o.Runs.(BehindDropper)
	if !ok || d.env.Due.IsZero() {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := bd.DropBehind(ctx, d.env.ID, d.env.Due); err != nil {
		d.log.Warn("taking a superseded scheduling off its run record failed; what waits for the task may wait up to an hour longer", "err", err)
	}
}

// ackUnrun acknowledges a delivery that must not run and settles it with o;
// it returns false (not claimed).
func (c *Consumer) ackUnrun(hctx context.Context, d *delivery, o Outcome, why string) bool {
	d.log.Info(why) //nolint:sloglint // why is a constant at every call site
	c.ack(hctx, d)
	c.settle(d, o)
	return false
}

// timed records an attempt's queue wait (first attempts: due to began)
// and run time (began to now) in the counters and for a LatencyObserver.
func (c *Consumer) timed(env Envelope, attempt int, began time.Time) {
	wait, run := time.Duration(-1), c.clk.Now().Sub(began)
	if attempt == 1 {
		wait = max(0, began.Sub(env.Due))
	}
	c.stats.observe(env.Type, wait, run)
	if lo, ok := c.o.Observer.(LatencyObserver); ok {
		lo.OnTimed(env.Type, wait, run)
	}
}

// acquireLimit takes a concurrency slot for taskType from the Limiter:
// through AcquireSlot when it is a SlotLimiter, so that the slot's loss
// can be watched (slot non-nil), else through Acquire.
func (c *Consumer) acquireLimit(hctx context.Context, taskType string) (release func(), slot Slot, ok bool, err error) {
	sl, isSlots := c.o.Limiter.(SlotLimiter)
	if !isSlots {
		release, ok, err = c.o.Limiter.Acquire(hctx, taskType)
		return release, nil, ok, err
	}
	slot, ok, err = sl.AcquireSlot(hctx, taskType)
	if err != nil || !ok || slot == nil {
		return nil, nil, ok, err
	}
	return func() {
		rctx, cancel := c.opCtx(context.Background())
		defer cancel()
		_ = slot.Release(rctx)
	}, slot, true, nil
}

// putBackUnstarted gives back a claimed delivery whose handler is not to
// begin, without an attempt: its message put back for why, or, when its
// visibility was lost (gone already: the worker that received it runs
// it), its claim handed back and the delivery settled Lost.
func (c *Consumer) putBackUnstarted(hctx context.Context, d *delivery, lost bool, why string) {
	if lost {
		c.handBack(hctx, d)
		c.settle(d, OutcomeLost)
		return
	}
	c.deferMsg(hctx, d, c.deferDelay(d), why)
}

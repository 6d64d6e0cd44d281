package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

func (c *Consumer) settle(d *delivery, o Outcome) {
	typ := d.typ
	c.stats.add(typ, func(x *leasecrontype.Counts) {
		switch o {
		case OutcomeSucceeded:
			x.Handled++
		case OutcomeRetried:
			x.Failed++
			x.Retried++
		case OutcomeDead:
			x.Dead++
			x.SetAside++
		case OutcomeDuplicate:
			x.Duplicates++
		case OutcomeCancelled, OutcomeSuperseded:
			x.Cancelled++
		case OutcomeMalformed:
			x.SetAside++
		case OutcomeDeferred, OutcomePaused, OutcomeSnoozed:
			x.Deferred++
		case OutcomeAbandoned:
			x.Abandoned++
		case OutcomeMisrouted:
			x.Misrouted++
		}
	})
	// The delivery's span ends with its outcome, before anyone hears of it.
	if d.span != nil {
		d.span.SetAttributes(tracing.Outcome.String(string(o)))
		d.span.End()
	}
	if c.o.Observer != nil {
		c.o.Observer.OnHandled(typ, o, c.clk.Now().Sub(d.start))
	}
}

// deletePayload removes a one-off task's payload blob once the task is done
// with; a series' blob is shared by its occurrences and is left alone, and
// a message that only tells a run's end (EndOnly) leaves it to the run's
// own message, which may still name it.
func (c *Consumer) deletePayload(hctx context.Context, d *delivery) {
	if d.env.PayloadBlob == "" || d.env.Series != "" || d.env.EndOnly || c.o.Payloads == nil || mutate.On(mutate.KeepPayload) {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.o.Payloads.Delete(ctx, d.env.PayloadBlob); err != nil {
		d.log.Warn("deleting the payload blob failed", "blob", d.env.PayloadBlob, "err", err)
	}
}

// finish records the delivery's outcome st on its run, trying a short
// fault again. A delivery without a claim records it only on its own run
// (OwnRunFinisher) where the recorder can tell, and one with a claim only
// while the run has not moved on since that claim (ClaimedRunFinisher);
// movedOn is the record it left alone because the run, still its
// scheduling's, has moved on (requeued, succeeded or died by another
// delivery, confirmed under another message, running under a live
// claim), and nil otherwise; ferr is the error of an end that could not
// be recorded.
func (c *Consumer) finish(hctx context.Context, d *delivery, st leasecrontype.RunState, err error, tail string) (movedOn *leasecrontype.Run, ferr error) {
	if c.o.Runs == nil {
		return nil, nil
	}
	if mutate.On(mutate.WrongOutcome) && st == leasecrontype.RunDead {
		st = leasecrontype.RunSucceeded
	}
	own, byMeta := c.o.Runs.(OwnRunFinisher)
	byMeta = byMeta && !d.claimed
	claimedFin, byClaim := c.o.Runs.(ClaimedRunFinisher)
	byClaim = byClaim && d.claimed
	recorded := true
	var found leasecrontype.Run
	// A short fault is tried again within seconds, as a rewrite is: given
	// up, the record would keep its last state (running) for good.
	ferr = c.transient(hctx, 0, func(ctx context.Context) error {
		if byMeta {
			// No claim names the run this ends: the record may be another
			// scheduling's of the id by now (issue 38, seed 8247: a
			// message set aside again after its death could not be told
			// to its dependents recorded that death over a replacement's
			// queued run, which then never ran).
			var ferr error
			found, recorded, ferr = own.FinishOwn(ctx, d.env.ID, d.env.runMeta(), st, err, tail)
			return ferr
		}
		if byClaim {
			// The claim may have lapsed while the handler ran, and
			// another delivery ended, requeued or holds the run since.
			var ferr error
			found, recorded, ferr = claimedFin.FinishClaimed(ctx, d.env.ID, st, err, tail)
			return ferr
		}
		return c.o.Runs.Finish(ctx, d.env.ID, st, err, tail)
	})
	switch {
	case ferr != nil:
		d.log.Warn("recording the run failed", "state", st, "err", ferr)
	case !recorded && !d.env.Due.IsZero() && !found.OfDue(d.env.Due):
		d.log.Info("the run record is another scheduling's now; not recording this delivery's end over it",
			"state", st, "record_due", found.Due)
	case !recorded:
		d.log.Info("the run has moved on since this message was sent; not recording this delivery's end over it",
			"state", st, "record_state", found.State)
		return &found, nil
	}
	return nil, ferr
}

// ack deletes the message; it reports whether it is gone.
func (c *Consumer) ack(hctx context.Context, d *delivery) bool {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.work.Delete(ctx, d.m); err != nil {
		if errors.Is(err, ErrMessageGone) {
			d.log.Warn("message was redelivered before it could be deleted", "err", err)
		} else {
			d.log.Warn("deleting the message failed; it will reappear", "err", err)
		}
		return false
	}
	return true
}

func (c *Consumer) succeed(hctx context.Context, d *delivery, tail string) {
	// Record success first: if the delete is lost, the redelivery is
	// recognised as a duplicate.
	movedOn, ferr := c.finish(hctx, d, leasecrontype.RunSucceeded, nil, tail)
	switch {
	case movedOn != nil:
		// This worker's claim lapsed while the handler ran, and another
		// delivery has ended, requeued or holds the run since: its end is
		// the run's, and this message a duplicate of it.
		// A message that says others wait tells them how it stands.
		d.log.Info("task succeeded, but its run has moved on since this worker's claim lapsed; acknowledging it as a duplicate",
			"record_state", movedOn.State, "record_worker", movedOn.Worker)
		if c.tellMovedOn(hctx, d, *movedOn, d.env) {
			c.ack(hctx, d)
			c.settle(d, OutcomeDuplicate)
		}
		return
	case claimUnanswered(ferr):
		// The run records did not answer: the success may not be
		// recorded, and acknowledged now the run would stay running for
		// good with no message left to end it, its batch and dependents
		// never hearing (issue 38, seed 62952: a record write cut short
		// by shutdown). The message is left to reappear after its
		// visibility timeout and runs the task again, as when a worker
		// dies between its handler's end and the record. The write may
		// have committed all the same: its batch and dependents are told
		// now, which OnEnd refuses unless the record holds the end, as
		// the reappearing message would not tell them once the id is
		// scheduled again (the run is then another scheduling's).
		d.log.Warn("task succeeded, but its run could not be recorded; the message reappears and runs it again", "err", ferr)
		c.ended(hctx, d, leasecrontype.RunSucceeded)
		c.stats.add(d.typ, func(x *leasecrontype.Counts) { x.Handled++ })
		c.settle(d, OutcomeLeft)
		return
	case c.ended(hctx, d, leasecrontype.RunSucceeded):
		// Recorded and told: nothing runs the task again, so its payload
		// blob goes whether or not the message could be deleted (a
		// deletion whose answer was lost finds the message gone, and
		// nothing comes back to delete the blob; row 196).
		c.ack(hctx, d)
		c.deletePayload(hctx, d)
	case ferr == nil:
		c.carryEnd(hctx, d, leasecrontype.RunSucceeded)
	}
	d.log.Info("task succeeded", "took", c.clk.Now().Sub(d.start))
	c.settle(d, OutcomeSucceeded)
}

func (c *Consumer) fail(hctx context.Context, d *delivery, herr error, tail string) {
	env := d.env
	env.FailedAttempts++
	env.LastError = trunc.Head(herr.Error(), 2<<10)
	env.Dequeues = d.m.DequeueCount
	if env.FailedAttempts >= d.maxA {
		c.stats.add(d.typ, func(x *leasecrontype.Counts) { x.Failed++ })
		reason := fmt.Sprintf("failed %d of %d attempts; last error: %s", env.FailedAttempts, d.maxA, env.LastError)
		c.dead(hctx, d, env, reason, herr, tail)
		return
	}
	delay := retry.Jitter(retry.Exp(c.o.BackoffBase, c.o.BackoffMax, env.FailedAttempts), c.o.rand())
	c.traceStep(hctx, d, "leasecron.retry", herr, attribute.String("leasecron.retry_in", delay.String()))
	d.log.Info("attempt failed; retrying later", "err", herr, "retry_in", delay, "max_attempts", d.maxA)
	c.finish(hctx, d, leasecrontype.RunFailed, herr, tail)
	if mutate.On(mutate.DropPayload) && d.env.PayloadBlob != "" && c.o.Payloads != nil {
		_ = c.o.Payloads.Delete(hctx, d.env.PayloadBlob)
	}
	if c.rewrite(hctx, d, env, delay) {
		// This consumer knows when the retry becomes visible: wake for it
		// rather than leave it to a backed-off poll.
		c.WakeAt(c.clk.Now().Add(delay))
	} else {
		d.log.Warn("the message will reappear after its visibility timeout without this attempt counted")
	}
	c.settle(d, OutcomeRetried)
}

// snooze puts the message back for delay without counting an attempt: the
// handler returned leasecrontype.Snooze. Past MaxSnoozes the snooze is a
// failed attempt instead, so a task cannot snooze forever.
func (c *Consumer) snooze(hctx context.Context, d *delivery, delay time.Duration, tail string) {
	d.env.Snoozes++
	if d.env.Snoozes > c.o.MaxSnoozes {
		c.fail(hctx, d, fmt.Errorf("%w: %d times; the limit (retry.max_snoozes) is %d", ErrTooManySnoozes, d.env.Snoozes, c.o.MaxSnoozes), tail)
		return
	}
	if delay > MaxVisibility {
		d.log.Warn("snooze longer than the queue's longest invisibility; the task comes back after a week", "asked", delay)
		delay = MaxVisibility
	}
	env := d.env
	env.Dequeues = d.m.DequeueCount
	if !c.rewrite(hctx, d, env, delay) {
		d.log.Warn("the message will reappear after its visibility timeout without the snooze")
		c.forgetClaim(d)
		c.settle(d, OutcomeLeft)
		return
	}
	until := c.clk.Now().Add(delay)
	if d.claimed {
		ctx, cancel := c.opCtx(hctx)
		if err := c.o.Runs.Snooze(ctx, d.env.ID, until, tail); err != nil {
			d.log.Warn("recording the snooze failed", "err", err)
		}
		cancel()
	}
	d.log.Info("task snoozed", "for", delay, "snoozes", env.Snoozes)
	c.WakeAt(until)
	c.settle(d, OutcomeSnoozed)
}

// claimForgetter is a RunRecorder that remembers its claims (runs.Store):
// told that an attempt ended with nothing recorded, it forgets the claim.
type claimForgetter interface{ Forget(id string) }

// forgetClaim tells the run recorder that d's attempt ended with nothing
// recorded: the run stays under its claim until the message comes back.
func (c *Consumer) forgetClaim(d *delivery) {
	if f, ok := c.o.Runs.(claimForgetter); ok && d.claimed {
		f.Forget(d.env.ID)
	}
}

// rewrite updates the message in place with env, hidden for delay.
func (c *Consumer) rewrite(hctx context.Context, d *delivery, env Envelope, delay time.Duration) bool {
	text, err := encodeSized(env)
	if err != nil {
		// LastError grew the envelope past the limit: drop it.
		env.LastError = ""
		if text, err = encodeSized(env); err != nil {
			text = d.m.Text
		}
	}
	// A short fault (throttling, a dropped connection) is tried again
	// within seconds: given up, the message would stay invisible for the
	// rest of its visibility timeout, and its task be late by that much.
	var m Message
	err = c.transient(hctx, 0, func(ctx context.Context) error {
		var uerr error
		m, uerr = c.work.Update(ctx, d.m, text, delay)
		return uerr
	})
	if err != nil {
		d.log.Warn("updating the message failed", "err", err)
		return false
	}
	d.m = m
	return true
}

// deferMsg puts the message back for later without counting an attempt
// (and hands back the run's claim if d holds one).
func (c *Consumer) deferMsg(hctx context.Context, d *delivery, delay time.Duration, why string) {
	c.handBack(hctx, d)
	env := d.env
	env.Dequeues = d.m.DequeueCount
	c.putBack(hctx, d, env, delay, why)
}

// putBack rewrites the message with env, hidden for delay, and settles d
// as deferred (left, when the rewrite fails).
func (c *Consumer) putBack(hctx context.Context, d *delivery, env Envelope, delay time.Duration, why string) {
	d.log.Debug("putting the message back", "why", why, "delay", delay)
	if c.rewrite(hctx, d, env, delay) {
		c.settle(d, OutcomeDeferred)
	} else {
		c.settle(d, OutcomeLeft)
	}
}

// handBack gives back the claim of a delivery that claimed its run,
// before its message is put back without running (stillStarts refused
// it): the run is as it was before the claim, with the attempt yet to be
// made (Unclaimer), and another worker's claim need not wait for this one
// to lapse; a claim made after its row was checked is handed back as at
// shutdown instead (below). It reports whether it was, and does nothing
// for a delivery without a claim.
func (c *Consumer) handBack(hctx context.Context, d *delivery) (asAtShutdown bool) {
	if !d.claimed {
		return false
	}
	defer func() { d.claimed = false }()
	u, ok := c.o.Runs.(Unclaimer)
	if !ok || d.rowChecked {
		// A claim made after the row was checked is handed back as at
		// shutdown, the attempt left on the record to be made again:
		// unstarted again, the run would send its message to the row,
		// which the mover may have removed meanwhile, confirming the
		// running run without a write (seed 1032's trap; a review of
		// row 82).
		if _, err := c.finish(hctx, d, leasecrontype.RunQueued, nil, ""); err != nil {
			c.forgetClaim(d)
		}
		return true
	}
	if err := c.transient(hctx, 0, func(ctx context.Context) error { return u.Unclaim(ctx, d.env.ID) }); err != nil {
		d.log.Warn("giving back the run's claim failed; another worker takes the run once the claim lapses", "err", err)
		c.forgetClaim(d)
	}
	return false
}

// misrouted puts back a message of a type this worker has no handler for,
// without an attempt, after deferDelay (it grows with the times the
// message was put back, up to PollMax): a worker of the pool that runs the
// type takes it meanwhile. It warns once a minute per type.
func (c *Consumer) misrouted(hctx context.Context, d *delivery) {
	now := c.clk.Now()
	c.mmu.Lock()
	last, seen := c.misroutedAt[d.typ]
	if !seen || now.Sub(last) >= time.Minute {
		c.misroutedAt[d.typ] = now
	}
	c.mmu.Unlock()
	if !seen || now.Sub(last) >= time.Minute {
		d.log.Warn("no handler for this type here; putting the message back without an attempt for a worker that has one (check types.<type>.queue and worker.queues)",
			"queue", cmp.Or(d.env.Queue, DefaultRouteQueue))
	}
	env := d.env
	env.Dequeues = d.m.DequeueCount
	if c.rewrite(hctx, d, env, c.deferDelay(d)) {
		c.settle(d, OutcomeMisrouted)
	} else {
		c.settle(d, OutcomeLeft)
	}
}

// noteWaiting records, the first time a task is put back for a reason
// other than a failure, that its run waits and why: the run shows as
// snoozed until the first wait ends, with the reason as its output, and the
// message carries the note so that later put-backs write nothing.
func (c *Consumer) noteWaiting(hctx context.Context, d *delivery, wait time.Duration, why string) {
	if c.o.Runs == nil || d.env.Waiting != "" && c.clk.Now().Sub(d.env.WaitingAt) < WaitingRefresh {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	until := c.clk.Now().Add(wait)
	noted := true
	var err error
	if n, ok := c.o.Runs.(WaitNoter); ok {
		noted, err = n.NoteWaiting(ctx, d.env.ID, d.env.runMeta(), until, why)
	} else {
		err = c.o.Runs.Snooze(ctx, d.env.ID, until, why)
	}
	if err == nil && !noted {
		return // not its run, or not recorded yet: asked again next time
	}
	if err != nil {
		d.log.Warn("recording why the task waits failed", "err", err)
		return
	}
	d.env.Waiting, d.env.WaitingAt = why, c.clk.Now().UTC()
}

// WaitingRefresh is how often the note that a task waits for its rate
// limit is written again while it waits: well within the five minutes
// (runs.QueuedWait) after which a confirmed run whose record has not
// changed is taken for one whose message is gone, so that a new
// scheduling of the id waits for a run still waiting for its budget
// however long that takes, and not for one whose message is gone.
const WaitingRefresh = 2 * time.Minute

// deferDelay grows with how often the message has been put back
// (approximated by its dequeue count beyond its attempts), up to PollMax.
func (c *Consumer) deferDelay(d *delivery) time.Duration {
	k := d.m.DequeueCount - 1 - int64(d.env.FailedAttempts)
	k = min(max(k, 0), 30)
	return retry.Jitter(retry.Exp(c.o.BackoffBase, min(c.o.BackoffMax, max(c.o.PollMax, c.o.BackoffBase)), int(k)+1), c.o.rand())
}

// dead records the run dead, tells its batch and dependents, then sets
// the message aside with reason and deletes it. If any step fails the
// message is rewritten with its attempts used up, so the next delivery
// tries again without running the handler.
func (c *Consumer) dead(hctx context.Context, d *delivery, env Envelope, reason string, herr error, tail string) {
	body, err := encodeSized(env)
	if err != nil {
		body = d.m.Text
	}
	rec := DeadLetter{Reason: reason, Body: body, Queue: c.work.Name(), MessageID: d.m.ID, DequeueCount: d.m.DequeueCount,
		RunID: env.ID, Type: env.Type, Attempts: env.FailedAttempts, Worker: c.o.InstanceID}
	d.log.Warn("task is dead; setting it aside", "reason", reason)
	if herr == nil {
		herr = errors.New(reason)
	}
	c.traceStep(hctx, d, "leasecron.dead_letter", herr, attribute.String("leasecron.reason", trunc.Head(reason, 512)))
	// The death is recorded, and its batch and dependents hear of it,
	// before the dead letter is set aside and the message goes, and the
	// message first says its attempts are used up: a worker that dies
	// anywhere in between leaves it to come back and set itself aside
	// without running (issue 38, seed 8247: a worker killed between the
	// message's delete and the death's record left the run running for
	// good). A delivery records the death only on its own run (without a
	// claim) or while the run has not moved on since its claim, and learns
	// whether the run has moved on.
	if d.claimed {
		// (Its text still counts the attempts it came with: env has
		// counted this one, and a claim may have taken the record's.)
		used := env
		used.FailedAttempts = max(env.FailedAttempts, d.maxA)
		used.Dequeues = d.m.DequeueCount
		c.rewrite(hctx, d, used, c.o.VisibilityTimeout) // on failure, as before it
	}
	r, ferr := c.finish(hctx, d, leasecrontype.RunDead, herr, tail)
	switch {
	case claimUnanswered(ferr):
		// The run records did not answer: the message waits, used up,
		// until they do, rather than go with the run left running.
		c.leaveUsedUp(hctx, d, env)
		return
	case r != nil:
		if r.State == leasecrontype.RunRunning && r.ClaimUntil.After(c.clk.Now()) {
			// Another delivery runs it: its end is the run's, unless its
			// worker is gone, which the claim's lapse shows. The message
			// goes back as it is: its unrecorded deliveries still count
			// for the crash guard, and its used-up attempts stay used.
			wait := min(max(r.ClaimUntil.Sub(c.clk.Now()), c.o.BackoffBase), c.o.VisibilityTimeout)
			c.putBack(hctx, d, env, wait, "its run is claimed by "+r.Worker)
			return
		}
		// A copy of a run that another delivery ran on, or that a
		// requeue brought back: its death is not the run's end. One that
		// says others wait tells them how the run stands.
		if !c.tellMovedOn(hctx, d, *r, env) {
			return
		}
		c.ackUnrun(hctx, d, OutcomeDuplicate, "the run has moved on since this message was sent; acknowledging it without a dead letter")
		return
	}
	if !c.ended(hctx, d, leasecrontype.RunDead) {
		c.leaveUsedUp(hctx, d, env) // it tells them again then
		return
	}
	if !c.setAsideAndDelete(hctx, d, rec) {
		// The run stays dead (its batch and dependents have heard so):
		// the message, used up, sets itself aside later.
		c.leaveUsedUp(hctx, d, env)
		return
	}
	c.settle(d, OutcomeDead)
}

// leaveUsedUp puts a dead task's message back with its attempts used up,
// after a backoff: the next delivery sets it aside without running the
// handler.
func (c *Consumer) leaveUsedUp(hctx context.Context, d *delivery, env Envelope) {
	env.FailedAttempts = max(env.FailedAttempts, d.maxA)
	env.Dequeues = d.m.DequeueCount
	c.rewrite(hctx, d, env, retry.Jitter(retry.Exp(c.o.BackoffBase, c.o.BackoffMax, env.FailedAttempts), c.o.rand()))
	c.settle(d, OutcomeLeft)
}

// setAsideAndDelete writes rec to the poison queue, then deletes the
// message. It reports whether the record was written (the message is
// never deleted otherwise).
func (c *Consumer) setAsideAndDelete(hctx context.Context, d *delivery, rec DeadLetter) bool {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.client.setAside(ctx, rec); err != nil {
		d.log.Error("setting the message aside failed; leaving it", "err", err)
		return false
	}
	c.ack(hctx, d)
	return true
}

// abandon releases a message whose handler was cancelled by shutdown, or
// for want of its concurrency slot (why says which), so another worker
// can take it at once; the attempt is not counted. A message whose
// visibility was lost (gone or redelivered) is left to reappear.
func (c *Consumer) abandon(d *delivery, tail string, lost bool, why string) {
	ctx, cancel := c.opCtx(context.Background())
	defer cancel()
	env := d.env
	env.Dequeues = d.m.DequeueCount
	if text, err := encodeSized(env); err == nil && !lost {
		if _, err := c.work.Update(ctx, d.m, text, 0); err != nil {
			d.log.Warn("releasing the message failed; it reappears after its visibility timeout", "err", err)
		}
	}
	c.finish(ctx, d, leasecrontype.RunQueued, errors.New(why), tail)
	d.log.Info("handler cancelled; message released", "why", why)
	c.settle(d, OutcomeAbandoned)
}

// traceStep records a step of a failed delivery (a retry scheduled, a dead
// letter) as a short span inside the delivery's, and marks both failed
// with err.
func (c *Consumer) traceStep(hctx context.Context, d *delivery, name string, err error, attrs ...attribute.KeyValue) {
	if d.span == nil {
		return
	}
	d.span.RecordError(err)
	d.span.SetStatus(codes.Error, trunc.Head(err.Error(), 256))
	_, s := c.tracer.Start(hctx, name, trace.WithAttributes(append(tracing.TaskAttrs(d.env.ID, d.env.Type, d.env.FailedAttempts+1, d.env.Series), attrs...)...))
	s.SetStatus(codes.Error, trunc.Head(err.Error(), 256))
	s.End()
}

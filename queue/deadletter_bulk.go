package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/mutate"
)

// BulkScanVisibility is how long RequeueWhere hides the records it has
// dequeued and not yet dealt with. A walk that a crash cuts short leaves
// them hidden for as long; the walk that takes over waits for them (see
// RequeueWhere).
var BulkScanVisibility = 2 * time.Minute

// bulkParallel bounds the requeues of one batch in flight at once.
const bulkParallel = 8

// WhereStats is what one RequeueWhere pass did.
type WhereStats struct {
	// Requeued and Failed count the matching records moved back and those
	// that could not be (a truncated or unreadable body; a request that
	// failed). Kept counts the records that did not match.
	Requeued, Failed, Kept int
	// LastError is the latest failure's message.
	LastError string
}

// RequeueWhere moves every record that match accepts back to the work
// queue with its attempts reset, as Requeue does (run marked queued,
// enqueued, then removed from the poison queue). A requeue under way is
// finished even when ctx ends, so only a crash between the last two steps
// can leave a duplicate message (at most one per requeue in flight),
// which run records suppress. It walks the poison queue once, in batches
// of MaxBatch dequeued together and requeued in parallel, and calls batch
// after each with that batch's figures; an error from batch stops the
// walk. Records that do not match, or that fail, are made visible again
// at the end. A requeue that fails on a fault is tried again, up to
// three times, before it counts as failed. failed, when not nil, carries
// the poison message ids that failed across walks: they are counted and
// tried once.
//
// op names the operation (a bulk operation's id): the tasks it requeues
// carry it (Envelope.RequeuedBy), and a later dead letter of such a task
// — it died again — is kept, not requeued again by the same operation, so
// an operation walking as often as it likes touches each dead letter it
// matched once.
func (dl *DeadLetters) RequeueWhere(ctx context.Context, op string, match func(DeadLetter) bool, failed map[string]bool, batch func(WhereStats) error) (WhereStats, error) {
	return dl.RequeueWhereGated(ctx, op, match, failed, nil, batch)
}

// RequeueWhereGated is RequeueWhere that calls gate, when not nil, after
// each dequeue and before acting on what it dequeued: an error from gate
// stops the walk, leaving the batch to come back into sight. A bulk
// operation's attempt checks there that the operation is still its own
// (another attempt may have taken it over while this one stalled).
func (dl *DeadLetters) RequeueWhereGated(ctx context.Context, op string, match func(DeadLetter) bool, failed map[string]bool, gate func() error, batch func(WhereStats) error) (WhereStats, error) {
	if failed == nil {
		failed = map[string]bool{}
	}
	var total WhereStats
	seen := map[string]bool{}
	keep := map[string]Message{}
	defer dl.restore(ctx, keep)
	for {
		msgs, err := dl.c.poison.Dequeue(ctx, MaxBatch, BulkScanVisibility)
		if err != nil {
			return total, fmt.Errorf("queue: walk dead letters: %w", err)
		}
		if gate != nil && len(msgs) > 0 {
			if err := gate(); err != nil {
				for _, m := range msgs {
					keep[m.ID] = m
				}
				return total, err
			}
		}
		var st WhereStats
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(bulkParallel)
		fresh := 0
		for _, m := range msgs {
			if seen[m.ID] {
				mu.Lock()
				keep[m.ID] = m
				mu.Unlock()
				continue
			}
			seen[m.ID] = true
			fresh++
			d := parseRecord(m)
			mu.Lock()
			skip := failed[m.ID] || !match(d) || op != "" && d.requeuedBy(op) && !mutate.On(mutate.BulkRewalk)
			if skip {
				keep[m.ID] = m
				st.Kept++
			}
			mu.Unlock()
			if skip {
				continue
			}
			g.Go(func() error {
				ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				err := dl.requeueTrying(ictx, d, op)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					keep[m.ID] = m
					failed[m.ID] = true
					st.Failed++
					st.LastError = err.Error()
					return nil
				}
				st.Requeued++
				return nil
			})
		}
		_ = g.Wait() // every requeue reports into st
		total.Requeued += st.Requeued
		total.Failed += st.Failed
		total.Kept += st.Kept
		if st.LastError != "" {
			total.LastError = st.LastError
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if len(msgs) > 0 {
			if err := batch(st); err != nil {
				return total, err
			}
		}
		if len(msgs) < MaxBatch || fresh == 0 {
			return total, nil
		}
	}
}

// requeueTries is how often a walk tries to requeue one dead letter
// before it counts it failed, and requeueRetryAfter the pause before the
// second try (doubled before each next one: the tries span 7.5 s, so a
// burst of faults that fails one try seldom fails them all; issue 38,
// seed 5527: three tries 1.5 s apart all met the faults of one burst).
const requeueTries = 5

var requeueRetryAfter = 500 * time.Millisecond

// requeueTrying is requeue, tried again after a failure that a later try
// may not meet (a storage fault): a requeue that failed after it marked
// the run queued leaves the run saying so while its dead letter stays,
// and the walk is the operation's only one, so a fault must not end it
// there (issue 38, seed 1330: an always-failing task stayed queued through
// the quiet phase, its dead letter never requeued). A try again finishes
// what the failed one began, as a walk after a crash does, except that a
// task a try sent is not sent again.
func (dl *DeadLetters) requeueTrying(ctx context.Context, d DeadLetter, op string) error {
	wait := requeueRetryAfter
	sent := false
	for try := 1; ; try++ {
		err := dl.requeueFrom(ctx, d, op, &sent)
		if err == nil || errors.Is(err, ErrNotRequeueable) || try == requeueTries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// restore makes the records of keep visible again (they reappear by
// themselves when their visibility ends if this fails).
func (dl *DeadLetters) restore(ctx context.Context, keep map[string]Message) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, m := range keep {
		if _, err := dl.c.poison.Update(rctx, m, m.Text, 0); err != nil && !errors.Is(rctx.Err(), context.DeadlineExceeded) {
			dl.log.Warn("making a dead letter visible again failed; it reappears by itself", "message", m.ID, "err", err)
		}
	}
}

// Count returns about how many records the poison queue holds, hidden
// ones included (the service's approximate count).
func (dl *DeadLetters) Count(ctx context.Context) (int, error) {
	n, err := dl.c.poison.Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: count dead letters: %w", err)
	}
	return n, nil
}

// requeuedBy reports whether the bulk operation op has requeued the
// record's task (Envelope.RequeuedBy and RequeuedBefore); false when the
// body is not a whole envelope.
func (d DeadLetter) requeuedBy(op string) bool {
	env, ok := d.Envelope()
	return ok && (env.RequeuedBy == op || slices.Contains(env.RequeuedBefore, op))
}

// MaxRequeuedBefore bounds Envelope.RequeuedBefore.
const MaxRequeuedBefore = 8

// requeuedBy records that op ("" by hand) moves the task back now: the
// operation that did so last moves to RequeuedBefore.
func (e *Envelope) requeuedBy(op string) {
	if prev := e.RequeuedBy; prev != "" && prev != op {
		e.RequeuedBefore = append([]string{prev}, slices.DeleteFunc(slices.Clone(e.RequeuedBefore), func(x string) bool { return x == prev })...)
		if len(e.RequeuedBefore) > MaxRequeuedBefore {
			e.RequeuedBefore = e.RequeuedBefore[:MaxRequeuedBefore]
		}
	}
	e.RequeuedBy = op
}

// Death names the death this record records, the same for every record of
// it (the poison queue may hold two, when setting it aside was retried):
// the message that died and its dequeue count, or for a record that does
// not say, the record's own message id.
func (d DeadLetter) Death() string {
	if d.MessageID == "" {
		return "p-" + d.Poison.ID
	}
	return d.MessageID + "-" + strconv.FormatInt(d.DequeueCount, 10)
}

// Envelope returns the task the record carries (ok false when its body is
// not a whole envelope).
func (d DeadLetter) Envelope() (Envelope, bool) {
	if d.Truncated {
		return Envelope{}, false
	}
	env, err := decodeBody(d.Body)
	return env, err == nil
}

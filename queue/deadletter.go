package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// RunRequeuer is what DeadLetters needs from the run records: leasecron's
// Runs table implements it.
type RunRequeuer interface {
	// MarkRequeued puts run id back to queued with its attempts reset; m
	// describes the task as it is sent again, and death names the death
	// the dead letter records (DeadLetter.Death). When it returns nil the
	// message is sent with Envelope.Marked set.
	//
	// A death that was requeued before is not requeued again, nor is a
	// dead letter of a run that is live again (another dead letter of it,
	// a duplicate delivery's, was requeued): earlier is then true and
	// nothing is written, and queued reports whether the run
	// is still queued as that requeue left it (its message may never have
	// been sent: a crash cut it short) rather than moved on since.
	// diedWith is the token the dead message carried: a run still live
	// under it is the one that died (its worker did not live to record
	// the death), and is requeued.
	MarkRequeued(ctx context.Context, id string, m leasecrontype.RunMeta, death, diedWith string) (earlier, queued bool, err error)
}

// Sentinel errors of the dead-letter operations.
var (
	// ErrNoDeadLetter: no record in the poison queue has that id.
	ErrNoDeadLetter = notfound.New("no such dead letter")
	// ErrNotRequeueable: the record's body is not a whole envelope (a
	// malformed message, or a body truncated to fit).
	ErrNotRequeueable = errors.New("dead letter cannot be requeued")
)

// DeadLetters operates on the poison queue: list, requeue, purge.
//
// The service's Peek returns at most 32 messages, so when the poison queue
// holds 32 or more, List and the requeue operations walk it by dequeuing
// with a short visibility timeout (30 s) and then make the
// messages they did not remove visible again. While a walk is under way the
// records it holds are invisible to other walks.
type DeadLetters struct {
	c    *Client
	runs RunRequeuer
	keys KeyTaker // nil: keys are not taken again
	// again checks that the id was not scheduled again (nil: not checked
	// beyond the run record).
	again func(ctx context.Context, env Envelope) error
	log   *slog.Logger
	// scanVisibility hides records during a walk. Default 30s.
	scanVisibility time.Duration
}

// NewDeadLetters returns the dead-letter operations of c. runs, when not
// nil, is told when a run is requeued.
func NewDeadLetters(c *Client, runs RunRequeuer) *DeadLetters {
	return &DeadLetters{c: c, runs: runs, log: c.log, scanVisibility: 30 * time.Second}
}

// KeyTaker makes a requeued task hold its unique key again
// (Envelope.UniqueKey): the task lost it when it died, or at the end of
// its window, and another task may hold it now. An error refuses the
// requeue (leasecron's: a *schedule.DuplicateError naming the holder).
// env.Token is the requeue's own (runs.RequeueToken of the death it
// requeues), which the run record lists once the requeue has marked the
// run queued again.
type KeyTaker func(ctx context.Context, env Envelope) error

// WithKeys returns dl with requeued tasks that hold a unique key taking it
// again first (a task holding it refuses the requeue), so that two live
// tasks never hold one key.
func (dl *DeadLetters) WithKeys(k KeyTaker) *DeadLetters {
	c := *dl
	c.keys = k
	return &c
}

// WithPendingCheck returns dl with each requeue asking pending first
// whether the task's id has a scheduling pending now, of another due time
// than the dead task's: the id was scheduled again since it died, and its
// run record does not say so until that task is moved. An error wrapping
// leasecrontype.ErrScheduledAgain refuses the requeue (issue 38, the
// simulator's seed 3514: a requeue brought an always-failing task back
// beside its id's new task, sent early and not yet confirmed).
func (dl *DeadLetters) WithPendingCheck(pending func(ctx context.Context, env Envelope) error) *DeadLetters {
	c := *dl
	c.again = pending
	return &c
}

func parseRecord(m Message) DeadLetter {
	var d DeadLetter
	if err := json.Unmarshal([]byte(m.Text), &d); err != nil || (d.Reason == "" && d.Body == "") {
		d = DeadLetter{Reason: "unreadable poison record", Body: m.Text}
	}
	d.Poison = m
	return d
}

// List returns every record in the poison queue, oldest first.
func (dl *DeadLetters) List(ctx context.Context) ([]DeadLetter, error) {
	peeked, err := dl.c.poison.Peek(ctx, MaxBatch)
	if err != nil {
		return nil, fmt.Errorf("queue: list dead letters: %w", err)
	}
	if len(peeked) < MaxBatch {
		out := make([]DeadLetter, len(peeked))
		for i, m := range peeked {
			out[i] = parseRecord(m)
		}
		return out, nil
	}
	var out []DeadLetter
	err = dl.walk(ctx, func(d DeadLetter) (bool, error) {
		out = append(out, d)
		return false, nil
	})
	return out, err
}

// Requeue moves the record whose run id (or poison message id) is id back
// to the work queue with its attempt count reset, and marks the run queued.
// Records of the run whose death was requeued before are removed on the
// way to the one it requeues; when they are all it finds, it answers
// ErrNoDeadLetter, having brought nothing back.
func (dl *DeadLetters) Requeue(ctx context.Context, id string) error {
	found, sent := false, false
	err := dl.walk(ctx, func(d DeadLetter) (bool, error) {
		if sent || (d.RunID != id && d.Poison.ID != id) {
			return false, nil
		}
		found = true
		// A dead letter whose death was requeued before (a requeue that
		// could not remove it) is only removed: the walk goes on to the
		// task's latest one (issue 38, seed 65138: the requeue answered
		// success having brought nothing back).
		err := dl.requeueFrom(ctx, d, "", &sent)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	switch {
	case !found:
		return fmt.Errorf("queue: requeue %q: %w", id, ErrNoDeadLetter)
	case !sent:
		// Every record found was of a death requeued before, and was only
		// removed: the task has moved on since (it ran, or died again and
		// is not set aside yet), and nothing was brought back (issue 38,
		// seed 103004: answered success, and the task never ran again).
		return fmt.Errorf("queue: requeue %q: %w: the only dead letters found were of deaths requeued before, and were removed; the task has moved on since (list its runs to see where it is)", id, ErrNoDeadLetter)
	}
	return nil
}

// RequeueAll moves every requeueable record back to the work queue and
// returns how many it moved; records that cannot be requeued stay, and
// records of deaths requeued before are removed without being counted.
func (dl *DeadLetters) RequeueAll(ctx context.Context) (int, error) {
	n := 0
	err := dl.walk(ctx, func(d DeadLetter) (bool, error) {
		sent := false
		if err := dl.requeueFrom(ctx, d, "", &sent); err != nil {
			if errors.Is(err, ErrNotRequeueable) {
				dl.log.Info("leaving a dead letter that cannot be requeued", "message", d.Poison.ID, "reason", d.Reason)
				return false, nil
			}
			return false, err
		}
		if sent { // not a record of a death requeued before, only removed
			n++
		}
		return true, nil
	})
	return n, err
}

// Purge deletes every record and returns about how many there were.
func (dl *DeadLetters) Purge(ctx context.Context) (int, error) {
	n, err := dl.c.poison.Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: purge dead letters: %w", err)
	}
	if err := dl.c.poison.Clear(ctx); err != nil {
		return 0, fmt.Errorf("queue: purge dead letters: %w", err)
	}
	return n, nil
}

// requeueFrom marks the run queued, enqueues d's envelope afresh, then deletes
// d (a crash in between leaves a duplicate, which run records suppress).
// op is the bulk operation requeueing it ("" for one requeued by hand): the
// envelope carries it (Envelope.RequeuedBy), so that the operation knows
// the task's next dead letter for one it made. With run records, a dead
// letter whose death was requeued before — a requeue that a crash cut
// short — is finished instead: sent again if its run has not moved on
// since (the send may not have happened), otherwise only removed.
//
// It reports in *sent whether the task went out;
// with *sent already true (an earlier try sent it, then failed to remove
// the dead letter), it only removes the dead letter, and one already gone
// counts as removed (that try's delete committed though its answer was
// lost). Sent again, the task would be on the queue twice.
func (dl *DeadLetters) requeueFrom(ctx context.Context, d DeadLetter, op string, sent *bool) error {
	if *sent {
		if err := dl.c.poison.Delete(ctx, d.Poison); err != nil && !errors.Is(err, ErrMessageGone) {
			return fmt.Errorf("queue: requeue %s: remove dead letter: %w", d.ID(), err)
		}
		return nil
	}
	if d.Truncated {
		return fmt.Errorf("queue: requeue %s: %w: its body was truncated when it was set aside", d.ID(), ErrNotRequeueable)
	}
	env, err := decodeBody(d.Body)
	if err != nil {
		return fmt.Errorf("queue: requeue %s: %w: %w", d.ID(), ErrNotRequeueable, err)
	}
	env.FailedAttempts, env.LastError, env.Dequeues = 0, "", 0
	env.Enqueued, env.Marked = time.Time{}, false
	env.requeuedBy(op)
	if dl.again != nil {
		// (Before the key is taken: refused, the requeue would leave the
		// key's guard as it took it, over the new task's.)
		if err := dl.again(ctx, env); errors.Is(err, leasecrontype.ErrScheduledAgain) {
			return fmt.Errorf("queue: requeue %s: %w: %w", d.ID(), ErrNotRequeueable, err)
		} else if err != nil {
			return fmt.Errorf("queue: requeue %s: look for a new task of its id: %w", d.ID(), err)
		}
	}
	if env.UniqueKey != "" && dl.keys != nil {
		k := env
		k.Token = runs.RequeueToken(d.Death()) // the requeue's, which names it on the guard
		if err := dl.keys(ctx, k); err != nil {
			return fmt.Errorf("queue: requeue %s: %w: %w", d.ID(), ErrNotRequeueable, err)
		}
	}
	if dl.runs != nil {
		// The run brought back is this message's alone: a message of the
		// run from before its death does not take it (runs.RequeueToken).
		diedWith := env.Token
		env.Token = runs.RequeueToken(d.Death())
		earlier, queued, err := dl.runs.MarkRequeued(ctx, env.ID, env.runMeta(), d.Death(), diedWith)
		switch {
		case errors.Is(err, leasecrontype.ErrScheduledAgain), errors.Is(err, leasecrontype.ErrRunCancelled):
			return fmt.Errorf("queue: requeue %s: %w: %w", d.ID(), ErrNotRequeueable, err)
		case err != nil:
			// Sent without the mark, the message would find the run dead
			// and be acknowledged as a second message of it: the dead
			// letter stays, and the requeue can be tried again.
			return fmt.Errorf("queue: requeue %s: mark its run queued again: %w", d.ID(), err)
		case earlier && !queued:
			// Requeued before, and its run has moved on since: only the
			// record was left. Gone already is removed all the same (the
			// SDK tried again a delete whose answer was lost, or a walk
			// took it meanwhile).
			if err := dl.c.poison.Delete(ctx, d.Poison); err != nil && !errors.Is(err, ErrMessageGone) {
				return fmt.Errorf("queue: requeue %s: remove a dead letter requeued before: %w", d.ID(), err)
			}
			dl.log.Info("removed a dead letter that was requeued before", "task_id", env.ID, "type", env.Type)
			return nil
		default:
			env.Marked = true
		}
	}
	if mutate.On(mutate.RequeueNoSend) && op == "" {
		*sent = true
		return dl.c.poison.Delete(ctx, d.Poison)
	}
	if err := dl.c.Enqueue(ctx, env, 0); err != nil {
		return err
	}
	*sent = true
	// Gone: removed already (the SDK tried again a delete whose first
	// answer was lost; issue 38, seed 3827), or taken by a walk meanwhile,
	// which with run records finds its death requeued before and only
	// removes it.
	if err := dl.c.poison.Delete(ctx, d.Poison); err != nil && !errors.Is(err, ErrMessageGone) {
		return fmt.Errorf("queue: requeue %s: remove dead letter: %w", d.ID(), err)
	}
	dl.log.Info("requeued a dead letter", "task_id", env.ID, "type", env.Type)
	return nil
}

// walk dequeues every poison record once (hidden for scanVisibility) and
// calls visit; visit reports whether it removed the record. Records not
// removed are made visible again before walk returns.
func (dl *DeadLetters) walk(ctx context.Context, visit func(DeadLetter) (removed bool, err error)) error {
	seen := map[string]bool{}
	keep := map[string]Message{} // by id: the latest receipt
	defer dl.restore(ctx, keep)
	for {
		msgs, err := dl.c.poison.Dequeue(ctx, MaxBatch, dl.scanVisibility)
		if err != nil {
			return fmt.Errorf("queue: walk dead letters: %w", err)
		}
		if len(msgs) == 0 {
			return nil
		}
		fresh := 0
		for _, m := range msgs {
			if seen[m.ID] {
				// The walk outlasted scanVisibility: this one was visited.
				keep[m.ID] = m
				continue
			}
			fresh++
			seen[m.ID] = true
			removed, err := visit(parseRecord(m))
			if !removed {
				keep[m.ID] = m
			}
			if err != nil {
				return err
			}
		}
		if len(msgs) < MaxBatch || fresh == 0 {
			return nil
		}
	}
}

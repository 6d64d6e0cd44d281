package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MaxQueues is the most work queues a Client spreads messages over.
const MaxQueues = 64

// QueueNames returns the names of n work queues named after base: base,
// then base-1, base-2, …
func QueueNames(base string, n int) []string {
	out := make([]string, max(n, 1))
	out[0] = base
	for i := 1; i < len(out); i++ {
		out[i] = base + "-" + strconv.Itoa(i)
	}
	return out
}

// Queues is one MessageQueue over several queues, so that the messages of
// a fleet are not bound by one queue's throughput (Azure: about 2,000
// messages/s per queue). Enqueue spreads messages over them in turn.
// Dequeue asks one queue per call — so an idle consumer's polling costs
// the same whatever the count — and moves on to the next queue when it
// got fewer messages than it asked for; while messages are flowing it
// looks on through the others at once. Update and Delete go to the queue
// a message came from; Count sums every queue.
type Queues struct {
	sendTo []MessageQueue // the queues Enqueue uses (never changes)
	next   atomic.Uint64  // Enqueue's turn
	mu     sync.Mutex
	// qs are every queue drained: sendTo, then any added (Drain). It only
	// grows by append, so a copy of the slice taken under mu stays valid.
	qs     []MessageQueue
	cursor int  // the queue the next Dequeue asks
	found  bool // the last Dequeue got messages
}

// NewQueues returns a MessageQueue over qs (at least one, at most
// MaxQueues).
func NewQueues(qs ...MessageQueue) (*Queues, error) {
	if len(qs) == 0 || len(qs) > MaxQueues {
		return nil, fmt.Errorf("%w: %d work queues: want 1 to %d", ErrInvalidOptions, len(qs), MaxQueues)
	}
	qs = qs[:len(qs):len(qs)] // Drain's appends never write into sendTo's array
	return &Queues{sendTo: qs, qs: qs}, nil
}

// Drain adds q to the queues drained (not to those sent to): a queue of
// the same family found in the account, which another client's larger
// queue count sends to, so that nothing sent there is stranded. Adding a
// queue of a name already drained does nothing; it reports whether q was
// added.
func (m *Queues) Drain(q MessageQueue) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, have := range m.qs {
		if have.Name() == q.Name() {
			return false
		}
	}
	if len(m.qs) >= 4*MaxQueues {
		return false
	}
	m.qs = append(m.qs, q)
	return true
}

// all returns the queues drained now.
func (m *Queues) all() []MessageQueue {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.qs
}

// Len returns how many queues are drained.
func (m *Queues) Len() int { return len(m.all()) }

// Name implements MessageQueue: the first queue's name and how many there
// are.
func (m *Queues) Name() string {
	qs := m.all()
	if len(qs) == 1 {
		return qs[0].Name()
	}
	return fmt.Sprintf("%s (+%d)", qs[0].Name(), len(qs)-1)
}

// Enqueue implements MessageQueue: the queues in turn.
func (m *Queues) Enqueue(ctx context.Context, text string, visibility time.Duration) (Message, error) {
	i := int((m.next.Add(1) - 1) % uint64(len(m.sendTo)))
	msg, err := m.sendTo[i].Enqueue(ctx, text, visibility)
	msg.queue = i
	return msg, err
}

// Dequeue implements MessageQueue (see Queues).
func (m *Queues) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]Message, error) {
	qs := m.all()
	m.mu.Lock()
	start, sweep := m.cursor, m.found
	m.mu.Unlock()
	tries := 1
	if sweep {
		tries = len(qs) // work was flowing: look through the others now
	}
	for k := range tries {
		i := (start + k) % len(qs)
		msgs, err := qs[i].Dequeue(ctx, max, visibility)
		for j := range msgs {
			msgs[j].queue = i
		}
		m.mu.Lock()
		if err != nil || len(msgs) < max {
			m.cursor = (i + 1) % len(qs)
		} else {
			m.cursor = i
		}
		m.found = err == nil && len(msgs) > 0
		m.mu.Unlock()
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
	}
	return nil, nil
}

// Peek implements MessageQueue: up to max from the queues in order.
func (m *Queues) Peek(ctx context.Context, max int) ([]Message, error) {
	var out []Message
	for i, q := range m.all() {
		if len(out) >= max {
			break
		}
		msgs, err := q.Peek(ctx, max-len(out))
		if err != nil {
			return out, err
		}
		for j := range msgs {
			msgs[j].queue = i
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func (m *Queues) of(msg Message) (MessageQueue, error) {
	qs := m.all()
	if msg.queue < 0 || msg.queue >= len(qs) {
		return nil, fmt.Errorf("%w: message %s names queue %d of %d", ErrMessageGone, msg.ID, msg.queue, len(qs))
	}
	return qs[msg.queue], nil
}

// Update implements MessageQueue, on the queue msg came from.
func (m *Queues) Update(ctx context.Context, msg Message, text string, visibility time.Duration) (Message, error) {
	q, err := m.of(msg)
	if err != nil {
		return msg, err
	}
	out, err := q.Update(ctx, msg, text, visibility)
	out.queue = msg.queue
	return out, err
}

// Delete implements MessageQueue, on the queue msg came from.
func (m *Queues) Delete(ctx context.Context, msg Message) error {
	q, err := m.of(msg)
	if err != nil {
		return err
	}
	return q.Delete(ctx, msg)
}

// Count implements MessageQueue: the sum over the queues (one request
// each).
func (m *Queues) Count(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, q := range m.all() {
		c, err := q.Count(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Name(), err))
			continue
		}
		n += c
	}
	return n, errors.Join(errs...)
}

// Clear implements MessageQueue: every queue.
func (m *Queues) Clear(ctx context.Context) error {
	var errs []error
	for _, q := range m.all() {
		if err := q.Clear(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

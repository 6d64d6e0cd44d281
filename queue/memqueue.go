package queue

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// MemoryQueue is an in-memory MessageQueue with the service's visibility and
// pop-receipt semantics, driven by a clock, for tests and examples. Unlike
// the service it does not round visibility to whole seconds.
type MemoryQueue struct {
	name string
	clk  clock.Clock
	mu   sync.Mutex
	seq  int64
	msgs map[string]*memMsg
	ops  map[string]int
}

type memMsg struct {
	Message
	order int64
}

// farFuture is the expiry of a message that never expires.
var farFuture = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// NewMemoryQueue returns an empty queue on clock c (nil means the real clock).
func NewMemoryQueue(name string, c clock.Clock) *MemoryQueue {
	return &MemoryQueue{name: name, clk: clock.OrReal(c), msgs: map[string]*memMsg{}, ops: map[string]int{}}
}

// Name implements MessageQueue.
func (q *MemoryQueue) Name() string { return q.name }

func (q *MemoryQueue) next() string {
	q.seq++
	return fmt.Sprintf("%d", q.seq)
}

// Enqueue implements MessageQueue.
func (q *MemoryQueue) Enqueue(_ context.Context, text string, visibility time.Duration) (Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops["enqueue"]++
	now := q.clk.Now()
	m := &memMsg{Message: Message{
		ID: "m" + q.next(), PopReceipt: "p" + q.next(), Text: text,
		Inserted: now, Expires: farFuture, NextVisible: now.Add(max(visibility, 0)),
	}}
	m.order = q.seq
	q.msgs[m.ID] = m
	return m.Message, nil
}

func (q *MemoryQueue) visible() []*memMsg {
	now := q.clk.Now()
	var out []*memMsg
	for _, m := range q.msgs {
		if !m.NextVisible.After(now) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].order < out[j].order })
	return out
}

// Dequeue implements MessageQueue.
func (q *MemoryQueue) Dequeue(_ context.Context, n int, visibility time.Duration) ([]Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops["dequeue"]++
	vis := q.visible()
	if len(vis) > int(clampBatch(n)) {
		vis = vis[:clampBatch(n)]
	}
	now := q.clk.Now()
	out := make([]Message, 0, len(vis))
	for _, m := range vis {
		m.DequeueCount++
		m.PopReceipt = "p" + q.next()
		m.NextVisible = now.Add(visibility)
		out = append(out, m.Message)
	}
	return out, nil
}

// Peek implements MessageQueue.
func (q *MemoryQueue) Peek(_ context.Context, n int) ([]Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops["peek"]++
	vis := q.visible()
	if len(vis) > int(clampBatch(n)) {
		vis = vis[:clampBatch(n)]
	}
	out := make([]Message, 0, len(vis))
	for _, m := range vis {
		p := m.Message
		p.PopReceipt = ""
		out = append(out, p)
	}
	return out, nil
}

func (q *MemoryQueue) find(m Message) (*memMsg, error) {
	cur, ok := q.msgs[m.ID]
	if !ok || cur.PopReceipt != m.PopReceipt {
		return nil, fmt.Errorf("message %s in %s: %w", m.ID, q.name, ErrMessageGone)
	}
	return cur, nil
}

// Update implements MessageQueue.
func (q *MemoryQueue) Update(_ context.Context, m Message, text string, visibility time.Duration) (Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops["update"]++
	cur, err := q.find(m)
	if err != nil {
		return m, err
	}
	cur.Text = text
	cur.PopReceipt = "p" + q.next()
	// As the service: visibility in whole seconds, rounded up as
	// AzureQueue.Update rounds it.
	cur.NextVisible = q.clk.Now().Add(time.Duration(seconds(max(visibility, 0))) * time.Second)
	return cur.Message, nil
}

// Delete implements MessageQueue.
func (q *MemoryQueue) Delete(_ context.Context, m Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops["delete"]++
	if _, err := q.find(m); err != nil {
		return err
	}
	delete(q.msgs, m.ID)
	return nil
}

// Count implements MessageQueue.
func (q *MemoryQueue) Count(context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs), nil
}

// Clear implements MessageQueue.
func (q *MemoryQueue) Clear(context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = map[string]*memMsg{}
	return nil
}

// all returns every message, visible or not, in enqueue order (a test aid).
func (q *MemoryQueue) all() []Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	all := make([]*memMsg, 0, len(q.msgs))
	for _, m := range q.msgs {
		all = append(all, m)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].order < all[j].order })
	out := make([]Message, len(all))
	for i, m := range all {
		out[i] = m.Message
	}
	return out
}

// opCounts returns how many calls of each kind (enqueue, dequeue, peek, update,
// delete) the queue has served (a test aid).
func (q *MemoryQueue) opCounts() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]int, len(q.ops))
	for k, v := range q.ops {
		out[k] = v
	}
	return out
}

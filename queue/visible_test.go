package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// failingPeek is a MessageQueue whose Peek fails.
type failingPeek struct {
	MessageQueue
	err error
}

func (f failingPeek) Peek(context.Context, int) ([]Message, error) { return nil, f.err }

// Visible counts the visible messages of every queue Depth counts, one
// peek a queue, and stops at the queue that shows as many as it was
// asked for: exact only when every queue showed fewer. Invisible messages
// (sent early, put back) count in Depth, not here. A peek that fails
// names its queue. (The mover's depth under backpressure, row 188 of
// docs/simulator.md; Azurite's single queue is TestAzureTTLNeverExpires.)
func TestVisibleCountsEveryQueue(t *testing.T) {
	ctx := context.Background()
	m, mems := newQueues(t, 2)
	enqueue := func(q *MemoryQueue, n int, vis time.Duration) {
		for range n {
			if _, err := q.Enqueue(ctx, "x", vis); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(mems[0], 2, 0)
	enqueue(mems[0], 1, time.Minute) // sent early: invisible
	enqueue(mems[1], 3, 0)
	c := NewClientWith(m, NewMemoryQueue("poison", nil), ClientOptions{})
	if n, err := c.Depth(ctx); err != nil || n != 6 {
		t.Fatalf("Depth = %d, %v; want 6 (the invisible one too)", n, err)
	}
	peeks := func() (a, b int) { return mems[0].opCounts()["peek"], mems[1].opCounts()["peek"] }
	for _, tc := range []struct {
		n            int
		count        int
		exact        bool
		peekA, peekB int
	}{
		{n: 10, count: 5, exact: true, peekA: 1, peekB: 1},
		{n: 4, count: 4, exact: false, peekA: 1, peekB: 1}, // the second queue shows the 2 it was asked for
		{n: 2, count: 2, exact: false, peekA: 1, peekB: 0}, // the first shows 2: the second is not asked
		{n: 5, count: 5, exact: false, peekA: 1, peekB: 1}, // exactly as many as asked: there may be more
	} {
		a0, b0 := peeks()
		count, exact, err := c.Visible(ctx, tc.n)
		a1, b1 := peeks()
		if err != nil || count != tc.count || exact != tc.exact || a1-a0 != tc.peekA || b1-b0 != tc.peekB {
			t.Errorf("Visible(%d) = %d, %v, %v after %d and %d peeks; want %d, %v after %d and %d",
				tc.n, count, exact, err, a1-a0, b1-b0, tc.count, tc.exact, tc.peekA, tc.peekB)
		}
	}
	busy := errors.New("server busy")
	broken, err := NewQueues(mems[0], failingPeek{MessageQueue: mems[1], err: busy})
	if err != nil {
		t.Fatal(err)
	}
	c = NewClientWith(broken, NewMemoryQueue("poison", nil), ClientOptions{})
	if count, exact, err := c.Visible(ctx, 10); !errors.Is(err, busy) || !strings.Contains(err.Error(), mems[1].Name()) || exact || count != 2 {
		t.Errorf("Visible over a failing peek = %d, %v, %v; want the first queue's 2, not exact, and the error naming %s", count, exact, err, mems[1].Name())
	}
}

// Counts says whether a message another mover sends goes to a queue this
// client's Depth counts: the default level of the queues it drains, and
// every route it has sent to. A held-back mover leaves another shard's
// early messages out of its depth only then (row 188 of
// docs/simulator.md).
func TestCountsIsWhatDepthCounts(t *testing.T) {
	ctx := context.Background()
	c, _, _ := routedClient(t, ClientOptions{Queues: 2, Consume: []string{"default", "bulk"}, Routes: map[string]Route{"mail": {Queue: "bulk", Priority: PriorityLow}}})
	for _, tc := range []struct {
		env  Envelope
		want bool
	}{
		{env: Envelope{Type: "x"}, want: true},
		{env: Envelope{Type: "x", Queue: "bulk"}, want: true},
		{env: Envelope{Type: "x", Queue: "other"}, want: false}, // drained by nobody here
		{env: Envelope{Type: "x", Priority: PriorityHigh}, want: false},
		{env: Envelope{Type: "mail"}, want: false},             // bulk at low: not sent to yet
		{env: Envelope{Type: "x", Queue: "Bad!"}, want: false}, // no such route
	} {
		if got := c.Counts(tc.env); got != tc.want {
			t.Errorf("Counts(%+v) = %v before any send; want %v", tc.env, got, tc.want)
		}
	}
	// Once this client has sent to a route, Depth counts its queues.
	for _, env := range []Envelope{{ID: "a", Type: "mail"}, {ID: "b", Type: "x", Priority: PriorityHigh}} {
		if err := c.Enqueue(ctx, env, 0); err != nil {
			t.Fatal(err)
		}
		if !c.Counts(env) {
			t.Errorf("Counts(%+v) = false after a send to its route; want true", env)
		}
	}
	if n, err := c.Depth(ctx); err != nil || n != 2 {
		t.Errorf("Depth = %d, %v; want the 2 sent", n, err)
	}
}

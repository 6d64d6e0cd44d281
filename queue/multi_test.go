package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

func newQueues(t *testing.T, n int) (*Queues, []*MemoryQueue) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	var mems []*MemoryQueue
	var qs []MessageQueue
	for i := range n {
		m := NewMemoryQueue(fmt.Sprintf("q-%d", i), clk)
		mems = append(mems, m)
		qs = append(qs, m)
	}
	m, err := NewQueues(qs...)
	if err != nil {
		t.Fatal(err)
	}
	return m, mems
}

func dequeues(mems []*MemoryQueue) int {
	n := 0
	for _, m := range mems {
		n += m.opCounts()["dequeue"]
	}
	return n
}

// TestQueuesSpreadAndDrain: messages go to the queues in turn; an idle
// Dequeue asks one queue (so idle polling costs the same whatever the
// count) and the next call the next one; once messages flow, a Dequeue
// looks through the others; Update and Delete reach the queue a message
// came from; Count sums them.
func TestQueuesSpreadAndDrain(t *testing.T) {
	ctx := context.Background()
	m, mems := newQueues(t, 3)
	for i := range 3 {
		if _, err := m.Dequeue(ctx, 32, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := dequeues(mems); got != i+1 {
			t.Fatalf("idle dequeue %d cost %d requests in all, want %d", i+1, got, i+1)
		}
	}
	for i := range 7 {
		if _, err := m.Enqueue(ctx, fmt.Sprintf("m%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int{3, 2, 2} {
		if n, _ := mems[i].Count(ctx); n != want {
			t.Errorf("queue %d holds %d, want %d (in turn)", i, n, want)
		}
	}
	if n, err := m.Count(ctx); err != nil || n != 7 {
		t.Fatalf("Count = %d, %v; want 7", n, err)
	}
	got := map[string]bool{}
	for range 10 {
		msgs, err := m.Dequeue(ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range msgs {
			got[msg.Text] = true
			if msg.Text == "m4" {
				up, err := m.Update(ctx, msg, "m4 updated", time.Minute)
				if err != nil {
					t.Fatalf("update: %v", err)
				}
				if err := m.Delete(ctx, up); err != nil {
					t.Fatalf("delete after update: %v", err)
				}
				continue
			}
			if err := m.Delete(ctx, msg); err != nil {
				t.Fatalf("delete %s: %v", msg.Text, err)
			}
		}
		if len(got) == 7 {
			break
		}
	}
	if len(got) != 7 {
		t.Fatalf("drained %d of 7 messages", len(got))
	}
	if n, _ := m.Count(ctx); n != 0 {
		t.Fatalf("%d left after deleting every message", n)
	}
	if _, err := NewQueues(); err == nil {
		t.Fatal("NewQueues() with no queue accepted")
	}
}

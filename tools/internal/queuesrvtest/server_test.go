package queuesrvtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/queuesrv"
	"github.com/leasecron/leasecron/queue"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start returns a server on a fake clock and its queue service client
// (through a connection string as workers build it, the port of blobs and
// tables unused).
func start(t *testing.T) (*queuesrv.Server, *clock, *azqueue.ServiceClient) {
	t.Helper()
	c := &clock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	s, err := queuesrv.StartWithClock(c.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	svc, err := azqueue.NewServiceClientFromConnectionString(azurite.ConnectionString("127.0.0.1", 1, s.Port(), 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, c, svc
}

// TestMessageLifecycle follows messages through leasecron's own queue
// client: the rules of visibility, receipts and counts it relies on.
func TestMessageLifecycle(t *testing.T) {
	ctx := context.Background()
	s, clk, svc := start(t)
	q, err := queue.NewAzureQueue(svc.NewQueueClient("work"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.NewQueueClient("work").Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.NewQueueClient("work").Create(ctx, nil); err != nil {
		t.Fatalf("creating an existing queue: %v", err)
	}
	first, err := q.Enqueue(ctx, "one", 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID == "" || !first.Inserted.Equal(clk.now()) || first.Expires.Year() != 9999 {
		t.Fatalf("enqueued: %+v", first)
	}
	if _, err := q.Enqueue(ctx, "two", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "later", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Count(ctx); err != nil || n != 3 {
		t.Fatalf("count = %d, %v; want 3", n, err)
	}
	peeked, err := q.Peek(ctx, 32)
	if err != nil || len(peeked) != 2 || peeked[0].Text != "one" || peeked[1].Text != "two" || peeked[0].PopReceipt != "" {
		t.Fatalf("peek = %+v, %v; want one and two in order, no receipt", peeked, err)
	}
	got, err := q.Dequeue(ctx, 32, 5*time.Second)
	if err != nil || len(got) != 2 || got[0].Text != "one" || got[0].DequeueCount != 1 || got[0].PopReceipt == "" {
		t.Fatalf("dequeue = %+v, %v; want one and two, dequeued once", got, err)
	}
	if again, err := q.Dequeue(ctx, 32, 5*time.Second); err != nil || len(again) != 0 {
		t.Fatalf("dequeue while hidden = %+v, %v; want none", again, err)
	}

	// Update replaces the receipt: the old one no longer deletes.
	upd, err := q.Update(ctx, got[0], "one, changed", 0)
	if err != nil || upd.PopReceipt == got[0].PopReceipt {
		t.Fatalf("update = %+v, %v", upd, err)
	}
	if err := q.Delete(ctx, got[0]); !errors.Is(err, queue.ErrMessageGone) {
		t.Fatalf("delete with a stale receipt: %v; want ErrMessageGone", err)
	}
	back, err := q.Dequeue(ctx, 1, 5*time.Second)
	if err != nil || len(back) != 1 || back[0].Text != "one, changed" || back[0].DequeueCount != 2 {
		t.Fatalf("after update = %+v, %v; want the changed text, dequeued twice", back, err)
	}
	if err := q.Delete(ctx, back[0]); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, back[0]); !errors.Is(err, queue.ErrMessageGone) {
		t.Fatalf("second delete: %v; want ErrMessageGone", err)
	}

	// Hidden messages come back when their time is up, in order.
	clk.add(10 * time.Second)
	got, err = q.Dequeue(ctx, 32, time.Second)
	if err != nil || len(got) != 2 || got[0].Text != "two" || got[1].Text != "later" || got[0].DequeueCount != 2 {
		t.Fatalf("after the timeouts = %+v, %v; want two (again) then later", got, err)
	}
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Len("work"); n != 0 {
		t.Fatalf("after clear: %d messages", n)
	}
	if s.Calls(queuesrv.OpGet) != 4 || s.Calls(queuesrv.OpPut) != 3 || s.Calls(queuesrv.OpDelete) != 3 || s.Calls(queuesrv.OpUpdate) != 1 || s.Calls(queuesrv.OpPeek) != 1 {
		t.Fatalf("calls: get %d put %d delete %d update %d peek %d", s.Calls(queuesrv.OpGet), s.Calls(queuesrv.OpPut), s.Calls(queuesrv.OpDelete), s.Calls(queuesrv.OpUpdate), s.Calls(queuesrv.OpPeek))
	}
}

// TestServiceRules: the refusals and the queue-level operations.
func TestServiceRules(t *testing.T) {
	ctx := context.Background()
	_, clk, svc := start(t)
	qc := svc.NewQueueClient("rules")
	if _, err := qc.EnqueueMessage(ctx, "x", nil); !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Fatalf("enqueue to a missing queue: %v; want QueueNotFound", err)
	}
	for _, n := range []string{"rules", "rules-2", "other"} {
		if _, err := svc.NewQueueClient(n).Create(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	pager := svc.NewListQueuesPager(&azqueue.ListQueuesOptions{Prefix: to.Ptr("rules")})
	for pager.More() {
		p, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range p.Queues {
			names = append(names, *q.Name)
		}
	}
	if fmt.Sprint(names) != "[rules rules-2]" {
		t.Fatalf("listed %v; want [rules rules-2]", names)
	}
	if _, err := qc.EnqueueMessage(ctx, strings.Repeat("x", queuesrv.MaxMessageBytes+1), nil); !queueerror.HasCode(err, queueerror.RequestBodyTooLarge) {
		t.Fatalf("a message over 64 KiB: %v; want RequestBodyTooLarge", err)
	}
	if _, err := qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(33))}); !queueerror.HasCode(err, queueerror.OutOfRangeQueryParameterValue) {
		t.Fatalf("33 messages at once: %v; want OutOfRangeQueryParameterValue", err)
	}
	// A message with a time-to-live expires; one of -1 never does.
	if _, err := qc.EnqueueMessage(ctx, "short", &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(60))}); err != nil {
		t.Fatal(err)
	}
	if _, err := qc.EnqueueMessage(ctx, "forever", &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))}); err != nil {
		t.Fatal(err)
	}
	clk.add(61 * time.Second)
	got, err := qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err != nil || len(got.Messages) != 1 || *got.Messages[0].MessageText != "forever" {
		t.Fatalf("after a minute: %+v, %v; want only forever", got.Messages, err)
	}
	if _, err := qc.Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := qc.GetProperties(ctx, nil); !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Fatalf("properties of a deleted queue: %v; want QueueNotFound", err)
	}
}

// BenchmarkDrain100k measures a get and a delete per message against a
// queue of 100,000 (the operations whose cost grows with the queue on
// Azurite): ns/op stays flat as b.N grows.
func BenchmarkDrain100k(b *testing.B) {
	ctx := context.Background()
	s, err := queuesrv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	svc, err := azqueue.NewServiceClientFromConnectionString(azurite.ConnectionString("127.0.0.1", 1, s.Port(), 1), nil)
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.NewAzureQueue(svc.NewQueueClient("drain"))
	if err != nil {
		b.Fatal(err)
	}
	for range 100_000 {
		if _, err := q.Enqueue(ctx, "m", 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		got, err := q.Dequeue(ctx, 1, time.Minute)
		if err != nil || len(got) != 1 {
			b.Fatalf("%+v %v", got, err)
		}
		if err := q.Delete(ctx, got[0]); err != nil {
			b.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, "m", 0); err != nil {
			b.Fatal(err)
		}
	}
}

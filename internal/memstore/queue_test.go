package memstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/internal/memstore"
)

// TestQueueMessages: visibility, receipts, dequeue counts, time-to-live
// and the limits, through the SDK.
func TestQueueMessages(t *testing.T) {
	srv, clk, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	qc := sc.Queue.NewQueueClient("work")
	_, err := qc.EnqueueMessage(ctx, "x", nil)
	wantCode(t, "enqueue to a missing queue", err, "QueueNotFound", 404)
	_, err = qc.Create(ctx, nil)
	must(t, "create", err)
	_, err = qc.Create(ctx, nil)
	must(t, "create again", err)
	_, err = sc.Queue.NewQueueClient("Work").Create(ctx, nil)
	wantCode(t, "create with a bad name", err, "InvalidResourceName", 400)

	put, err := qc.EnqueueMessage(ctx, "one", &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))})
	must(t, "enqueue", err)
	if !put.Messages[0].InsertionTime.Equal(t0) || put.Messages[0].ExpirationTime.Year() != 9999 {
		t.Fatalf("enqueued %+v", put.Messages[0])
	}
	_, err = qc.EnqueueMessage(ctx, "short", &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(60))})
	must(t, "enqueue", err)
	_, err = qc.EnqueueMessage(ctx, "later", &azqueue.EnqueueMessageOptions{VisibilityTimeout: to.Ptr(int32(10))})
	must(t, "enqueue", err)
	_, err = qc.EnqueueMessage(ctx, strings.Repeat("x", memstore.MaxMessageBytes+1), nil)
	wantCode(t, "a message over 64 KiB", err, "RequestBodyTooLarge", 413)

	got, err := qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(32)), VisibilityTimeout: to.Ptr(int32(5))})
	must(t, "dequeue", err)
	if len(got.Messages) != 2 || *got.Messages[0].MessageText != "one" || *got.Messages[0].DequeueCount != 1 {
		t.Fatalf("dequeued %d", len(got.Messages))
	}
	first := got.Messages[0]
	upd, err := qc.UpdateMessage(ctx, *first.MessageID, *first.PopReceipt, "one, changed", &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(0))})
	must(t, "update", err)
	_, err = qc.DeleteMessage(ctx, *first.MessageID, *first.PopReceipt, nil)
	wantCode(t, "delete with a stale receipt", err, "PopReceiptMismatch", 400)
	peek, err := qc.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	must(t, "peek", err)
	if len(peek.Messages) != 1 || *peek.Messages[0].MessageText != "one, changed" {
		t.Fatalf("peeked %d", len(peek.Messages))
	}
	_, err = qc.DeleteMessage(ctx, *first.MessageID, *upd.PopReceipt, nil)
	must(t, "delete", err)
	_, err = qc.DeleteMessage(ctx, *first.MessageID, *upd.PopReceipt, nil)
	wantCode(t, "delete twice", err, "MessageNotFound", 404)

	clk.Advance(61 * time.Second) // "short" expires; "later" shows
	got, err = qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	must(t, "dequeue", err)
	if len(got.Messages) != 1 || *got.Messages[0].MessageText != "later" {
		t.Fatalf("after a minute: %d messages", len(got.Messages))
	}
	props, err := qc.GetProperties(ctx, nil)
	must(t, "properties", err)
	if *props.ApproximateMessagesCount != 1 || srv.QueueLen("work") != 1 {
		t.Fatalf("count %d, len %d", *props.ApproximateMessagesCount, srv.QueueLen("work"))
	}
	_, err = qc.ClearMessages(ctx, nil)
	must(t, "clear", err)
	// Text that XML escapes survives the round trip.
	tricky := "a<b>&c\"d'e\tf\ng\rh €😀 ]]> &amp;"
	_, err = qc.EnqueueMessage(ctx, tricky, nil)
	must(t, "enqueue", err)
	got, err = qc.DequeueMessages(ctx, nil)
	must(t, "dequeue", err)
	if len(got.Messages) != 1 || *got.Messages[0].MessageText != tricky {
		t.Fatalf("round trip of %q: %q", tricky, *got.Messages[0].MessageText)
	}
	_, err = qc.ClearMessages(ctx, nil)
	must(t, "clear", err)
	if srv.QueueLen("work") != 0 || srv.QueueLen("nope") != -1 {
		t.Fatal("clear left messages")
	}
	n := srv.Requests()
	if n["PutMessage"] != 6 || n["GetMessages"] != 3 || n["PeekMessages"] != 1 || n["UpdateMessage"] != 1 || n["DeleteMessage"] != 3 || n["CreateQueue"] != 3 {
		t.Fatalf("requests %v", n)
	}
}

// TestDuplicateDelivery: the hook keeps a received message visible, so a
// second getter receives it too and the first getter's receipt goes
// stale.
func TestDuplicateDelivery(t *testing.T) {
	dup := true
	var asked []string
	_, _, sc := account(t, memstore.Options{DuplicateDelivery: func(q, _ string) bool { asked = append(asked, q); return dup }})
	ctx := ctxT(t)
	qc := sc.Queue.NewQueueClient("work")
	_, err := qc.Create(ctx, nil)
	must(t, "create", err)
	_, err = qc.DequeueMessages(ctx, nil)
	must(t, "dequeue from an empty queue", err)
	_, err = qc.EnqueueMessage(ctx, "m", nil)
	must(t, "enqueue", err)
	a, err := qc.DequeueMessage(ctx, nil)
	must(t, "dequeue", err)
	dup = false
	b, err := qc.DequeueMessage(ctx, nil)
	must(t, "dequeue", err)
	if len(a.Messages) != 1 || len(b.Messages) != 1 || *a.Messages[0].MessageID != *b.Messages[0].MessageID || *b.Messages[0].DequeueCount != 2 {
		t.Fatalf("first %d, second %d messages", len(a.Messages), len(b.Messages))
	}
	if c, err := qc.DequeueMessage(ctx, nil); err != nil || len(c.Messages) != 0 {
		t.Fatalf("third getter: %v, %v", c.Messages, err)
	}
	_, err = qc.DeleteMessage(ctx, *a.Messages[0].MessageID, *a.Messages[0].PopReceipt, nil)
	wantCode(t, "the first getter's delete", err, "PopReceiptMismatch", 400)
	_, err = qc.DeleteMessage(ctx, *b.Messages[0].MessageID, *b.Messages[0].PopReceipt, nil)
	must(t, "the second getter's delete", err)
	if strings.Join(asked, ",") != "work,work" {
		t.Fatalf("asked for %v (never for an empty get)", asked)
	}
}

// HiddenLong finds a message hidden by a visibility timeout of at least a
// span (a pause hold) until it shows again, however little of the
// timeout is left, and not one hidden for less, or no longer hidden.
func TestHiddenLong(t *testing.T) {
	srv, clk, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	qc := sc.Queue.NewQueueClient("work")
	_, err := qc.Create(ctx, nil)
	must(t, "create", err)
	if _, ok := srv.HiddenLong(clk.Now(), time.Minute); ok {
		t.Fatalf("an empty queue has a message hidden long")
	}
	_, err = qc.EnqueueMessage(ctx, "soon", &azqueue.EnqueueMessageOptions{VisibilityTimeout: to.Ptr(int32(30))})
	must(t, "enqueue", err)
	_, err = qc.EnqueueMessage(ctx, "now", nil)
	must(t, "enqueue", err)
	if _, ok := srv.HiddenLong(clk.Now(), time.Minute); ok {
		t.Fatalf("a message hidden for 30 s counts as hidden for a minute or more")
	}
	got, err := qc.DequeueMessages(ctx, nil)
	must(t, "dequeue", err)
	held := got.Messages[0]
	_, err = qc.UpdateMessage(ctx, *held.MessageID, *held.PopReceipt, "held", &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(600))})
	must(t, "hold", err)
	want := clk.Now().Add(10 * time.Minute)
	clk.Advance(9*time.Minute + 50*time.Second)
	if at, ok := srv.HiddenLong(clk.Now(), time.Minute); !ok || !at.Equal(want) {
		t.Fatalf("10 s before a 10-minute hold ends: hidden long until %v, %v; want %v", at, ok, want)
	}
	clk.Advance(10 * time.Second)
	if at, ok := srv.HiddenLong(clk.Now(), time.Minute); ok {
		t.Fatalf("a hold that has ended is still hidden long, until %v", at)
	}
}

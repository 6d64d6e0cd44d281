package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Bulk operations through a worker: requeue the dead letters of a type and
// reason, cancel the pending tasks of a type and id prefix, disable the
// series of a type; each counted first, done once, with its counts; and a
// requeue taken over after a crashed walk waits for the records that walk
// left hidden.
func TestBulkOperations(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	// No other test of this package runs a bulk operation: shortening
	// how long a crashed walk hides dead letters is this test's alone.
	queue.BulkScanVisibility = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var healed atomic.Bool
	var mu sync.Mutex
	succeeded := map[string]int{}
	start := func() (stop func()) {
		w, err := leasecron.NewWorker(leasecron.WorkerOptions{
			Storage: st, Names: names, InstanceID: "bulk",
			Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 500 * time.Millisecond},
			Mover:    schedule.MoverSettings{PollEvery: 200 * time.Millisecond},
			Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond, Concurrency: 8, MaxAttempts: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("bad", func(ctx context.Context, task leasecron.Task) error {
			if !healed.Load() {
				return errors.New(string(task.Payload))
			}
			mu.Lock()
			succeeded[task.ID]++
			mu.Unlock()
			return nil
		})
		w.Handle("other", func(ctx context.Context, task leasecron.Task) error { return errors.New("other") })
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		return func() { wcancel(); <-done }
	}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	until := func(what string, ok func() (bool, string)) { t.Helper(); eventually(ctx, t, what, ok) }
	count := func(op leasecron.BulkOp) int {
		t.Helper()
		n, err := c.CountBulk(ctx, op)
		if err != nil {
			t.Fatalf("CountBulk %s: %v", op, err)
		}
		return n
	}
	finish := func(b leasecron.Bulk) leasecron.Bulk {
		t.Helper()
		var got leasecron.Bulk
		until(b.ID+" finishes", func() (bool, string) {
			got, err = c.Bulk(ctx, b.ID)
			return err == nil && got.State != "running", fmt.Sprintf("%+v %v", got, err)
		})
		return got
	}
	stop := start()

	// 60 dead letters of type bad (half with reason boom-A), 20 of other.
	var items []leasecron.Item
	for i := range 60 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("bad-", i), Type: "bad", Payload: fmt.Sprint("boom-", "AB"[i%2:i%2+1]), Due: time.Now()})
	}
	for i := range 20 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("other-", i), Type: "other", Due: time.Now()})
	}
	if _, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	until("80 dead letters", func() (bool, string) {
		p, err := c.PeekDeadLetters(ctx, 1)
		return err == nil && p.Total == 80, fmt.Sprint(p.Total, err)
	})
	healed.Store(true)
	requeueA := leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "bad", Reason: "boom-A"}}
	for _, c := range []struct {
		op   leasecron.BulkOp
		want int
	}{
		{leasecron.BulkOp{Kind: leasecron.BulkRequeueDead}, 80},
		{leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "bad"}}, 60},
		{requeueA, 30},
		{leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "bad", Since: time.Now().Add(time.Hour)}}, 0},
	} {
		if got := count(c.op); got != c.want {
			t.Errorf("CountBulk %s = %d, want %d", c.op, got, c.want)
		}
	}
	b, err := c.StartBulk(ctx, requeueA, 30, "tester")
	if err != nil {
		t.Fatal(err)
	}
	if b = finish(b); b.State != "succeeded" || b.Done != 30 || b.Failed != 0 || b.By != "tester" {
		t.Fatalf("requeue of boom-A: %+v, want succeeded with 30 done", b)
	}
	until("the 30 requeued tasks run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(succeeded) == 30, fmt.Sprint(len(succeeded))
	})
	if got := count(leasecron.BulkOp{Kind: leasecron.BulkRequeueDead}); got != 50 {
		t.Errorf("dead letters left: %d, want 50", got)
	}

	// Cancel: 40 of type later with ids c-…, 10 keep-….
	items = items[:0]
	for i := range 40 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("c-", i), Type: "later", Due: time.Now().Add(time.Hour)})
	}
	for i := range 10 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("keep-", i), Type: "later", Due: time.Now().Add(time.Hour)})
	}
	for i := range 3 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("tick-", i), Type: "tick", Due: time.Now().Add(time.Hour), Recurrence: "@every 1h"})
	}
	items = append(items, leasecron.Item{ID: "tock", Type: "tock", Due: time.Now().Add(time.Hour), Recurrence: "@every 1h"})
	if _, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	cancelC := leasecron.BulkOp{Kind: leasecron.BulkCancelPending, Filter: leasecron.BulkFilter{Type: "later", IDPrefix: "c-"}}
	if got := count(cancelC); got != 40 {
		t.Errorf("CountBulk %s = %d, want 40", cancelC, got)
	}
	if b = finish(must(c.StartBulk(ctx, cancelC, 40, ""))); b.State != "succeeded" || b.Done != 40 {
		t.Errorf("cancel: %+v, want 40 done", b)
	}
	page, err := c.List(ctx, &leasecron.ListOptions{Type: "later", Limit: 100})
	if err != nil || len(page.Items) != 10 {
		t.Errorf("pending of type later after the cancel: %d, %v; want the 10 keep-…", len(page.Items), err)
	}
	disable := leasecron.BulkOp{Kind: leasecron.BulkDisableSeries, Filter: leasecron.BulkFilter{Type: "tick"}}
	if got := count(disable); got != 3 {
		t.Errorf("CountBulk %s = %d, want 3", disable, got)
	}
	if b = finish(must(c.StartBulk(ctx, disable, 3, ""))); b.Done != 3 {
		t.Errorf("disable: %+v, want 3 done", b)
	}
	if got := count(disable); got != 0 {
		t.Errorf("series of type tick not disabled after the operation: %d", got)
	}
	if it, err := c.Get(ctx, "tock"); err != nil || !it.Disabled.IsZero() {
		t.Errorf("tock, of another type, was disabled: %+v %v", it, err)
	}

	// Bad operations are refused, naming what is wrong.
	for _, op := range []leasecron.BulkOp{
		{Kind: "delete-everything"},
		{Kind: leasecron.BulkCancelPending},
		{Kind: leasecron.BulkDisableSeries, Filter: leasecron.BulkFilter{Reason: "x", Type: "tick"}},
		{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "Bad Type"}},
	} {
		if _, err := c.StartBulk(ctx, op, 0, ""); !errors.Is(err, leasecron.ErrInvalidTask) {
			t.Errorf("StartBulk %+v: %v, want ErrInvalidTask", op, err)
		}
	}
	if _, err := c.Bulk(ctx, "bulk-nope"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("an unknown operation: %v, want ErrNotFound", err)
	}
	// An id no operation can have is not sent to storage, which would
	// refuse it as if busy.
	for _, id := range []string{"", "a/b", "a#b", "a\x01"} {
		if _, err := c.Bulk(ctx, id); !errors.Is(err, leasecron.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("bulk operation id %q", id)) && id != "" {
			t.Errorf("Bulk(%q): %v, want ErrNotFound naming the id", id, err)
		}
	}

	// A takeover: the worker stops; an operation that a crashed worker
	// had begun (10 done, 12 records still hidden by its walk) is taken up
	// by a new worker, which requeues the rest, waiting for the hidden
	// ones, and runs each task once.
	stop()
	rest := leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "bad"}}
	b = must(c.StartBulk(ctx, rest, 30, "tester"))
	if err := leasecron.SetBulkAttempts(c, b.ID, 1, 10); err != nil {
		t.Fatal(err)
	}
	svc, err := azqueue.NewServiceClientFromConnectionString(st.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	vis := int32(3)
	hidden, err := svc.NewQueueClient(names.PoisonQueue).DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: ptr(int32(12)), VisibilityTimeout: &vis})
	if err != nil || len(hidden.Messages) != 12 {
		t.Fatalf("hiding 12 dead letters: %v", err)
	}
	stop = start()
	defer stop()
	if b = finish(b); b.State != "succeeded" || b.Done != 10+30 || b.Attempts != 2 {
		t.Errorf("the operation taken over: %+v, want succeeded, 40 done (10 before), 2 attempts", b)
	}
	until("the 60 tasks of type bad run", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(succeeded) == 60, fmt.Sprint(len(succeeded))
	})
	mu.Lock()
	for id, n := range succeeded {
		if n != 1 {
			t.Errorf("%s ran %d times after its requeue, want once", id, n)
		}
	}
	mu.Unlock()
	if got := count(leasecron.BulkOp{Kind: leasecron.BulkRequeueDead}); got != 20 {
		t.Errorf("dead letters left: %d, want the 20 of type other", got)
	}
	list, err := c.Bulks(ctx)
	if err != nil || len(list) != 4 || list[0].ID != b.ID {
		t.Errorf("Bulks: %d, %v; want 4, newest first", len(list), err)
	}

	// A dead letter that cannot be requeued (its body was cut to fit) is
	// counted failed once, however many walks the operation makes.
	qc, err := queue.NewClient(svc, queue.ClientOptions{Queue: names.Queue, PoisonQueue: names.PoisonQueue})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := (queue.Envelope{V: queue.EnvelopeVersion, ID: "huge", Type: "bad", Payload: strings.Repeat("x", 100_000), Due: time.Now()}).Encode()
	if err := qc.SetAside(ctx, env, "failed 1 of 1 attempts; last error: too big"); err != nil {
		t.Fatal(err)
	}
	b = finish(must(c.StartBulk(ctx, rest, 1, "tester")))
	if b.State != "succeeded" || b.Done != 0 || b.Failed != 1 || !strings.Contains(b.LastError, "truncated") {
		t.Errorf("a truncated dead letter: %+v, want succeeded with 1 failed naming the truncation", b)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

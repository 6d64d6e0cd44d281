package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
)

// TestBulkRequeueSurvivesAKill requeues BULK_N (default 100,000) dead
// letters as one bulk operation and SIGKILLs the worker running it a
// third of the way through. Another worker takes it over; in the end the
// poison queue is empty and the work queue holds every task: none lost.
// A requeue is two requests (send, then remove the dead letter), so a
// SIGKILL between them can leave a second message of the task, at most one
// per requeue in flight (8); the run record drops it when it is consumed.
// The test counts them. The type is paused so the tasks wait in
// the queue to be counted, and each worker runs one task at a time, so
// that the one running the operation takes nothing else; the other
// worker does not consume. Long: LEASECRON_LONG=1 (make test-long).
func TestBulkRequeueSurvivesAKill(t *testing.T) {
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("BULK_N")); err == nil && v > 0 {
		n = v
	}
	f := startFleet(t, 1, map[string]any{"worker": map[string]any{"pause_hold": "5s", "concurrency": 1}})
	if _, err := f.StartWorker("LEASECRON_WORKER_CONSUME=false"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Pause(ctx, "sink", time.Time{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ids := injectDeadLetters(ctx, t, f.ConnectionString(), n, "sink", "sink-")
	t.Logf("%d dead letters injected in %s", n, time.Since(began).Round(time.Second))
	op := leasecron.BulkOp{Kind: leasecron.BulkRequeueDead}
	count, err := cl.CountBulk(ctx, op)
	if err != nil || count != n {
		t.Fatalf("CountBulk: %d, %v; want %d", count, err, n)
	}
	began = time.Now()
	b, err := cl.StartBulk(ctx, op, count, "long test")
	if err != nil {
		t.Fatal(err)
	}
	// Kill the worker running it a third of the way through.
	killed := ""
	for killed == "" {
		got, err := cl.Bulk(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Done >= n/3 {
			st, err := cl.Status(ctx, b.ID)
			if err != nil || st.Run == nil || st.Run.Worker == "" {
				t.Fatalf("who runs %s: %+v %v", b.ID, st, err)
			}
			killed = st.Run.Worker
			f.Signal(killed, syscall.SIGKILL)
			t.Logf("SIGKILLed %s, which ran %s, at %d of %d requeued (%s in)", killed, b.ID, got.Done, n, time.Since(began).Round(time.Second))
			if _, err := f.StartWorker(); err != nil {
				t.Fatal(err)
			}
		}
		if got.State != "running" {
			t.Fatalf("%s finished before the kill: %+v", b.ID, got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		got, err := cl.Bulk(ctx, b.ID)
		if err == nil && got.State != "running" {
			b = got
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never finished: %+v %v", b.ID, got, err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s %s in %s after %d attempts: %s", b.ID, b.State, time.Since(began).Round(time.Second), b.Attempts, b.Summary())
	if b.State != "succeeded" || b.Attempts < 2 || b.Failed != 0 || b.Done > n || b.Done < n-32 {
		t.Errorf("the operation: %+v; want succeeded after a takeover, 0 failed, done within one batch of %d", b, n)
	}
	left, err := cl.CountBulk(ctx, op)
	if err != nil || left != 0 {
		t.Errorf("dead letters left: %d, %v; want 0", left, err)
	}
	// Stop the workers, let the paused messages come back into sight,
	// then read the whole work queue.
	for _, name := range f.Names() {
		if p := f.Worker(name); p != nil {
			_ = p.Stop(30 * time.Second)
		}
	}
	time.Sleep(6 * time.Second)
	svc, err := azqueue.NewServiceClientFromConnectionString(f.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := svc.NewQueueClient(leasecron.Names{}.WithDefaults().Queue)
	seen := map[string]int{}
	vis := int32(600)
	for {
		resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: ptr(int32(32)), VisibilityTimeout: &vis})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			break
		}
		for _, m := range resp.Messages {
			env, err := decodeEnvelope(*m.MessageText)
			if err != nil {
				t.Fatalf("a message of the work queue: %v", err)
			}
			seen[env.ID]++
		}
	}
	lost, twice := 0, 0
	for _, id := range ids {
		switch seen[id] {
		case 0:
			lost++
		case 1:
		default:
			twice++
		}
	}
	t.Logf("work queue: %d distinct tasks of %d; %d lost, %d requeued twice", len(seen), n, lost, twice)
	if lost != 0 || twice > 8*(b.Attempts-1) || len(seen) != n {
		t.Errorf("%d lost, %d requeued twice, %d distinct; want 0, at most 8 per takeover and %d", lost, twice, len(seen), n)
	}
	fmt.Fprintf(os.Stderr, "BULK RESULT n=%d attempts=%d done=%d elapsed=%s lost=%d twice=%d\n", n, b.Attempts, b.Done, b.Finished.Sub(b.Created).Round(time.Second), lost, twice)
}

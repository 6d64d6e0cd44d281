package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestBulkRequeueSurvivesAKill requeues BULK_N (default 10,000) dead
// letters as one bulk operation and SIGKILLs the worker running it a third
// of the way through. Another worker takes it over; in the end the
// poison queue is empty and every task has run exactly once: none lost,
// none run twice. (A requeue is two requests — send, then remove the dead
// letter — so a SIGKILL between them can leave a second message of a task,
// at most one per requeue in flight; the run record drops it, which the
// fleet's duplicate counter shows.) Long: LEASECRON_LONG=1
// (make test-long).
//
// Azurite's queue get and delete scan the whole queue (a delete takes
// 65 ms at 10,000 messages, 300 ms at 30,000 and 800 ms at 60,000 on this
// machine), so the 100,000 would take most of a day on it, where
// Azure takes minutes. BULK_QUEUES=memory serves the queues from
// queuesrv, an in-memory implementation of the same REST protocol whose
// operations do not slow as the queue grows, with tables and blobs still
// on Azurite: `make test-bulk` runs 100,000 that way, and make test-long
// its 10,000. BULK_QUEUES=azurite (the default of a plain go test) keeps
// the queues on Azurite.
func TestBulkRequeueSurvivesAKill(t *testing.T) {
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("BULK_N")); err == nil && v > 0 {
		n = v
	}
	var f *fleet.Fleet
	switch q := os.Getenv("BULK_QUEUES"); q {
	case "memory":
		f = startFleetOnMemoryQueues(t, 2)
	case "", "azurite":
		f = startFleet(t, 2, nil)
	default:
		t.Fatalf("BULK_QUEUES=%q: want memory (queuesrv) or azurite (the default)", q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute+time.Duration(n/100)*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ids := injectDeadLetters(ctx, t, f.ConnectionString(), n, "rec", "bulk-")
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
		time.Sleep(200 * time.Millisecond)
		got, err := cl.Bulk(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != "running" {
			t.Fatalf("%s finished before the kill: %+v", b.ID, got)
		}
		if got.Done < n/3 {
			continue
		}
		st, err := cl.Status(ctx, b.ID)
		if err != nil || st.Run == nil || st.Run.Worker == "" {
			t.Fatalf("who runs %s: %+v %v", b.ID, st, err)
		}
		killed = st.Run.Worker
		f.Signal(killed, syscall.SIGKILL)
		t.Logf("SIGKILLed %s, which ran %s, at %d of %d requeued (%s in)", st.Run.Worker, b.ID, got.Done, n, time.Since(began).Round(time.Second))
		if _, err := f.StartWorker(); err != nil {
			t.Fatal(err)
		}
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
	if left, err := cl.CountBulk(ctx, op); err != nil || left != 0 {
		t.Errorf("dead letters left: %d, %v; want 0", left, err)
	}
	lcWaitRecords(ctx, t, f, 30*time.Minute+time.Duration(n/200)*time.Minute, ids...)
	time.Sleep(10 * time.Second) // a duplicate would run by now
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	// A task the killed worker was running when it died runs again
	// elsewhere (at least once); any other second start is a requeue
	// applied twice.
	starts := fleet.Starts(rs)
	twice, rerun := 0, 0
	for _, id := range ids {
		if len(starts[id]) < 2 {
			continue
		}
		onKilled := false
		for _, r := range starts[id] {
			onKilled = onKilled || r.Worker == killed
		}
		if onKilled {
			rerun++
		} else {
			twice++
		}
	}
	dups := int64(-1)
	if s, err := cl.Stats(ctx); err == nil && s.Counters != nil {
		dups = s.Counters.Total.Duplicates
	}
	t.Logf("%d tasks run after the requeue; %d run again after the kill interrupted them on %s; %d run twice otherwise; %d duplicate deliveries dropped by run records", len(ids), rerun, killed, twice, dups)
	if twice != 0 {
		t.Errorf("%d tasks ran twice without having been interrupted by the kill", twice)
	}
	fmt.Fprintf(os.Stderr, "BULK RESULT n=%d attempts=%d done=%d elapsed=%s rerun_after_kill=%d twice=%d duplicates_dropped=%d\n", n, b.Attempts, b.Done, b.Finished.Sub(b.Created).Round(time.Second), rerun, twice, dups)
}

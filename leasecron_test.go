package leasecron_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// testAccount returns the shared Azurite and resource names of t's own.
func testAccount(t *testing.T) (leasecron.Storage, leasecron.Names) {
	t.Helper()
	srv := azuritetest.Shared(t)
	return leasecron.Storage{ConnectionString: srv.ConnectionString()}, leasecron.Names{
		ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c"),
	}
}

// TestWorkerAndClient runs an in-process worker and drives it through the
// client: schedule, run, status, cancel before and after the move,
// reschedule, unknown ids.
func TestWorkerAndClient(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "solo",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 300 * time.Millisecond, Concurrency: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	block := make(chan struct{})
	w.Handle("note", func(ctx context.Context, task leasecron.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		if string(task.Payload) == "block" {
			select {
			case <-block:
			case <-ctx.Done():
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	waitState := func(id string, want leasecron.RunState) {
		t.Helper()
		for {
			s, err := c.Status(ctx, id)
			// State, not Run.State: the mover records a run queued just
			// before it sends the task and removes its row.
			if err == nil && s.Run != nil && s.State() == string(want) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never reached %s (last %+v, %v)", id, want, s.Run, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	if _, err := c.Schedule(ctx, leasecron.Item{ID: "a", Type: "note", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	waitState("a", leasecron.RunSucceeded)
	if !w.HasControl() {
		t.Error("the only worker should lead")
	}

	// Cancel before the move removes the row; it never runs.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "later", Type: "note", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	// A pending id is refused. (A task due now may already have run and
	// left no row by the time a second Schedule arrives, so the check uses
	// one due later.)
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "later", Type: "note", Due: time.Now()}, nil); !errors.Is(err, leasecron.ErrAlreadyScheduled) {
		t.Fatalf("duplicate id: %v", err)
	}
	res, err := c.Cancel(ctx, "later")
	if err != nil || !res.Removed {
		t.Fatalf("cancel before move: %+v %v", res, err)
	}

	// Cancel after the move: occupy the only slot, then cancel a queued task.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "blocker", Type: "note", Payload: "block", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	waitState("blocker", leasecron.RunRunning)
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "victim", Type: "note", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	waitState("victim", leasecron.RunQueued)
	res, err = c.Cancel(ctx, "victim")
	if err != nil || !res.Marked || res.Removed {
		t.Fatalf("cancel after move: %+v %v", res, err)
	}
	close(block)
	waitState("blocker", leasecron.RunSucceeded)
	time.Sleep(time.Second) // give the worker time to receive and acknowledge the cancelled message
	if s, _ := c.Status(ctx, "victim"); s.State() != "cancelled" {
		t.Errorf("victim state %s", s.State())
	}

	// Reschedule brings a far task forward.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "moved", Type: "note", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reschedule(ctx, "moved", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitState("moved", leasecron.RunSucceeded)

	if _, err := c.Cancel(ctx, "nosuch"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("cancel unknown: %v", err)
	}
	if _, err := c.Reschedule(ctx, "nosuch", time.Now()); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("reschedule unknown: %v", err)
	}
	if _, err := c.Status(ctx, "nosuch"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("status unknown: %v", err)
	}
	if _, err := c.Cancel(ctx, "a"); !errors.Is(err, leasecron.ErrAlreadyFinished) {
		t.Errorf("cancel finished: %v", err)
	}
	s, err := c.Stats(ctx)
	if err != nil || s.Leader.Holder != "solo" {
		t.Errorf("stats: %+v %v", s, err)
	}

	reqs := w.Requests()
	if reqs.Total <= 0 || reqs.ByOp["blob lease-acquire"] < 1 || reqs.ByOp["queue dequeue"] < 1 {
		t.Errorf("requests: %+v; want lease acquisitions and dequeues", reqs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["victim"] != 0 || ran["later"] != 0 || ran["a"] != 1 || ran["moved"] != 1 {
		t.Errorf("runs: %v", ran)
	}
	// The worker flushed its counters when it stopped.
	s, err = c.Stats(context.Background())
	if err != nil || s.Counters == nil {
		t.Fatalf("stats after shutdown: %+v %v", s, err)
	}
	if cs := s.Counters; cs.Instances != 1 || cs.Total.Handled != 3 || cs.ByType["note"].Handled != 3 || cs.Total.Cancelled < 1 {
		t.Errorf("counters after shutdown: %+v; want one instance, 3 handled, a cancelled delivery", *cs)
	}
	if s.Leader.Held() {
		t.Errorf("leader after shutdown: %+v; want the lease released", s.Leader)
	}
}

func TestRequestCountsSub(t *testing.T) {
	base := leasecron.RequestCounts{Total: 5, ByOp: map[string]int64{"blob lease-renew": 2, "queue dequeue": 3}}
	now := leasecron.RequestCounts{Total: 9, ByOp: map[string]int64{"blob lease-renew": 2, "queue dequeue": 6, "table batch": 1}}
	got := now.Sub(base)
	if got.Total != 4 || len(got.ByOp) != 2 || got.ByOp["queue dequeue"] != 3 || got.ByOp["table batch"] != 1 {
		t.Fatalf("Sub = %+v; want 4 requests: 3 dequeues, 1 batch", got)
	}
}

func TestInvalidNamesRefused(t *testing.T) {
	for _, c := range []struct {
		names        leasecron.Names
		field, value string
	}{
		{leasecron.Names{Queue: "Bad_Queue"}, "Names.Queue", "Bad_Queue"},
		{leasecron.Names{LeaseBlob: " locks"}, "Names.LeaseBlob", `" locks"`},
	} {
		t.Run(c.value, func(t *testing.T) {
			_, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"}, Names: c.names})
			if err == nil {
				t.Fatalf("%s %s: want an error", c.field, c.value)
			}
			if got := err.Error(); !strings.Contains(got, c.field) || !strings.Contains(got, c.value) {
				t.Fatalf("error %q should name the field %s and value %s", got, c.field, c.value)
			}
		})
	}
}

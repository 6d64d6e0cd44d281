package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// quickWorker is a worker on the account with short intervals: a 15 s
// lease polled every second, mover passes and idle polls every 500 ms.
func quickWorker(t *testing.T, st leasecron.Storage, names leasecron.Names) *leasecron.Worker {
	t.Helper()
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "w",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runWorker runs w until the returned stop is called, which also checks
// what Run returned.
func runWorker(ctx context.Context, t *testing.T, w *leasecron.Worker) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// queueDepth is how many messages the account's work queue holds.
func queueDepth(ctx context.Context, t *testing.T, st leasecron.Storage, names leasecron.Names) int {
	t.Helper()
	sc, err := storage.New(storage.Config{ConnectionString: st.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	qc, err := queue.NewClient(sc.Queue, queue.ClientOptions{Queue: names.Queue, PoisonQueue: names.PoisonQueue})
	if err != nil {
		t.Fatal(err)
	}
	n, err := qc.Depth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A task due now (a series: its first occurrence) is in the queue when
// Schedule returns — no worker runs here, so nobody else could have put it
// there — recorded queued with its message's token, its row marked sent; a
// task due later is left to the mover.
func TestScheduleSendsATaskDueNow(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, it := range []leasecron.Item{
		{ID: "now", Type: "t", Due: now},
		{ID: "soon", Type: "t", Due: now.Add(2 * time.Second)},
		{ID: "later", Type: "t", Due: now.Add(time.Hour)},
		{ID: "series", Type: "t", Due: now, Recurrence: "@every 1h"},
	} {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := queueDepth(ctx, t, st, names); n != 3 {
		t.Fatalf("the queue holds %d messages, want 3 (the tasks due within a pass)", n)
	}
	for _, id := range []string{"now", "soon"} {
		s, err := c.Status(ctx, id)
		if err != nil || s.Run == nil || s.Run.State != leasecron.RunQueued || s.Pending == nil || !s.Pending.Sent || !s.Pending.SendingUntil.IsZero() {
			t.Errorf("%s: run %+v, pending %+v, %v; want queued, its row marked sent", id, s.Run, s.Pending, err)
		}
	}
	if s, err := c.Status(ctx, "later"); err != nil || s.Run != nil || s.Pending == nil || s.Pending.Sent {
		t.Errorf("later: run %+v, pending %+v, %v; want it left to the mover", s.Run, s.Pending, err)
	}
	series, err := c.Get(ctx, "series")
	if err != nil || !series.Sent || !series.SentUntil.Equal(series.Due) {
		t.Errorf("the series' row after its first occurrence was sent: %+v, %v", series, err)
	}
	// Pending until the mover moves its row: a second task with the id is
	// refused, as for any pending task.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "now", Type: "t", Due: time.Now()}, nil); !errors.Is(err, leasecron.ErrAlreadyScheduled) {
		t.Errorf("a second schedule of a task sent now: %v, want ErrAlreadyScheduled", err)
	}
	// RunNow sends a pending one-off task at once too.
	if _, err := c.RunNow(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	if n := queueDepth(ctx, t, st, names); n != 4 {
		t.Fatalf("after run-now the queue holds %d messages, want 4", n)
	}
	// With SendWithin negative every task waits for the mover.
	off, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, SendWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Schedule(ctx, leasecron.Item{ID: "off", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if n := queueDepth(ctx, t, st, names); n != 4 {
		t.Fatalf("with SendWithin < 0 the queue holds %d messages, want still 4", n)
	}
}

// Tasks sent by the client run once each, never after a cancel that
// returned, and ScheduleMany sends its due items at once as well.
func TestTasksSentNowRunOnceAndObeyCancel(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	// Scheduled and cancelled before any worker runs.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "cancelled", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Cancel(ctx, "cancelled"); err != nil || !res.Removed {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	// Scheduled for now, then moved 3 s ahead: it runs once, not early.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "moved", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	movedTo, err := c.Reschedule(ctx, "moved", time.Now().Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Scheduled, then replaced, both due now: the first message is a no-op.
	for _, payload := range []string{`"first"`, `"second"`} {
		if _, err := c.Schedule(ctx, leasecron.Item{ID: "replaced", Type: "t", Due: time.Now(), Payload: payload}, &leasecron.ScheduleOptions{Replace: true}); err != nil {
			t.Fatal(err)
		}
	}
	var items []leasecron.Item
	for i := range 20 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("many-%02d", i), Type: "t", Due: time.Now()})
	}
	res, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{})
	if err != nil {
		t.Fatalf("schedule many: %v (%+v)", err, res)
	}
	if n := queueDepth(ctx, t, st, names); n != 24 {
		t.Fatalf("the queue holds %d messages, want 24 (20 of the batch, the cancelled task's, the rescheduled one's old message and both forms of the replaced one)", n)
	}

	w := quickWorker(t, st, names)
	var mu sync.Mutex
	ran := map[string]int{}
	var replacedPayload string
	var movedRan time.Time
	w.Handle("t", func(_ context.Context, task leasecron.Task) error {
		mu.Lock()
		ran[task.ID]++
		switch task.ID {
		case "replaced":
			replacedPayload = string(task.Payload)
		case "moved":
			movedRan = time.Now()
		}
		mu.Unlock()
		return nil
	})
	defer runWorker(ctx, t, w)()
	// A cancel right after a schedule, with the worker running.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "cancelled-live", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	liveCancel, cerr := c.Cancel(ctx, "cancelled-live")
	for {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		if n >= 22 && queueDepth(ctx, t, st, names) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("ran %v", ran)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The movers' passes that follow find the rows marked sent and move
	// them without sending again.
	time.Sleep(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	for id, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	if ran["cancelled"] != 0 {
		t.Error("a task cancelled before any worker ran was run")
	}
	if ran["moved"] != 1 || movedRan.Before(movedTo.Due) {
		t.Errorf("the rescheduled task ran %d times, at %s; want once, not before %s", ran["moved"], movedRan.Format(time.StampMilli), movedTo.Due.Format(time.StampMilli))
	}
	if ran["replaced"] != 1 || replacedPayload != `"second"` {
		t.Errorf("the replaced task ran %d times, last with payload %s; want once, with its second form", ran["replaced"], replacedPayload)
	}
	if cerr == nil && (liveCancel.Removed || liveCancel.Marked) && ran["cancelled-live"] != 0 {
		t.Errorf("a task whose cancel returned %+v was run", liveCancel)
	}
	for _, it := range items {
		if ran[it.ID] != 1 {
			t.Errorf("%s of the batch ran %d times", it.ID, ran[it.ID])
		}
	}
	if p, err := c.List(ctx, nil); err != nil || len(p.Items) != 0 {
		t.Errorf("rows left pending: %v, %v", p.Items, err)
	}
}

// Under backpressure (ClientOptions.MaxDepth) a client sends tasks due now
// itself only until the queue would pass max_depth; the rest are written
// for the mover, which holds back.
func TestSendingNowRespectsMaxDepth(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, MaxDepth: 5, ResumeBelow: 2})
	if err != nil {
		t.Fatal(err)
	}
	var items []leasecron.Item
	for i := range 12 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("bp-%02d", i), Type: "t", Due: time.Now()})
	}
	if _, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "one-more", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if n := queueDepth(ctx, t, st, names); n != 5 {
		t.Fatalf("the queue holds %d messages, want 5 (max_depth): the rest wait for the mover", n)
	}
	p, err := c.List(ctx, &leasecron.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, it := range p.Items {
		if it.Sent {
			sent++
		} else if !it.SendingUntil.IsZero() {
			t.Errorf("%s is marked as being sent but was left to the mover", it.ID)
		}
	}
	if sent != 5 || len(p.Items) != 13 {
		t.Errorf("%d of %d rows marked sent, want 5 of 13", sent, len(p.Items))
	}
}

// A task sent for now that has already run is no longer pending, although
// its row waits for the mover's next pass: RunNow and Reschedule refuse it
// with ErrNotFound instead of running it again (issue 38, seed 1001: a
// run-now 5 ms after the run succeeded ran the one-off task twice).
func TestRunNowOfATaskThatAlreadyRanIsRefused(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, st, names)
	// A worker that never leads: no mover removes the sent row.
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "consumer", NoLead: true,
		Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	held, release := make(chan struct{}), make(chan struct{})
	w.Handle("t", func(_ context.Context, task leasecron.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		if task.ID == "held" {
			close(held)
			<-release
		}
		return nil
	})
	defer runWorker(ctx, t, w)()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "once", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := c.Status(ctx, "once")
		if err != nil {
			t.Fatal(err)
		}
		if s.Run != nil && s.Run.State == leasecron.RunSucceeded {
			if s.Pending == nil || !s.Pending.Sent {
				t.Fatalf("the sent row is gone (%+v): nothing left to test", s.Pending)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the task did not succeed: %+v", s.Run)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := c.RunNow(ctx, "once"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("run-now of a task that already ran: %v, want ErrNotFound", err)
	}
	if _, err := c.Reschedule(ctx, "once", time.Now().Add(time.Second)); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("reschedule of a task that already ran: %v, want ErrNotFound", err)
	}
	if n := queueDepth(ctx, t, st, names); n != 0 {
		t.Errorf("the queue holds %d messages after the refused run-now, want 0", n)
	}
	// Nor is it cancelled as a pending task: its success stands.
	if _, err := c.Cancel(ctx, "once"); !errors.Is(err, leasecron.ErrAlreadyFinished) {
		t.Errorf("cancel of a task that already ran: %v, want ErrAlreadyFinished", err)
	}
	if s, err := c.Status(ctx, "once"); err != nil || s.Run == nil || s.Run.State != leasecron.RunSucceeded {
		t.Errorf("status after the refused cancel: %+v, %v; want succeeded", s.Run, err)
	}
	// A task cancelled while it runs has started too: its row, still
	// waiting for the mover, is not moved by a run-now to run it again
	// (issue 38, the simulator's seed 14673).
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "held", Type: "t", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the held task did not start")
	}
	if res, err := c.Cancel(ctx, "held"); err != nil || res.Removed || !res.Marked {
		t.Fatalf("cancel of a running task: %+v, %v; want its run marked cancelled", res, err)
	}
	if s, err := c.Status(ctx, "held"); err != nil || s.Pending == nil || !s.Pending.Sent {
		t.Fatalf("the sent row of the cancelled task is gone (%+v, %v): nothing left to test", s, err)
	}
	if _, err := c.RunNow(ctx, "held"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("run-now of a task cancelled while it ran: %v, want ErrNotFound", err)
	}
	close(release)
	mu.Lock()
	defer mu.Unlock()
	if ran["once"] != 1 || ran["held"] != 1 {
		t.Errorf("the tasks ran %v times, want once each", ran)
	}
}

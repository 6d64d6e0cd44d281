package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Without run records a worker cannot tell that a task enqueued early has
// changed since, so the client refuses to change it rather than pretend;
// the task then runs as scheduled.
func TestChangeAfterEarlyEnqueueRefusedWithoutRunRecords(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	st := leasecron.Storage{ConnectionString: srv.ConnectionString()}
	names := leasecron.Names{
		ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c"),
	}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "solo", NoRuns: true,
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 4)
	w.Handle("note", func(_ context.Context, task leasecron.Task) error { ran <- task.ID; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, NoRuns: true})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(6 * time.Second)
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "job", Type: "note", Due: due}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		it, err := c.Get(ctx, "job")
		if err != nil {
			t.Fatalf("the task left the schedule before it was enqueued early: %v", err)
		}
		if it.Sent {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, op := range map[string]func() error{
		"cancel":     func() error { _, err := c.Cancel(ctx, "job"); return err },
		"reschedule": func() error { _, err := c.Reschedule(ctx, "job", due.Add(time.Hour)); return err },
		"replace": func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "job", Type: "note", Due: due, Payload: "v2"}, &leasecron.ScheduleOptions{Replace: true})
			return err
		},
	} {
		t.Run(fmt.Sprint(name), func(t *testing.T) {
			if err := op(); !errors.Is(err, leasecron.ErrAlreadySent) || !strings.Contains(err.Error(), "run records") {
				t.Errorf("%s after the early enqueue = %v, want ErrAlreadySent saying why", name, err)
			}
		})
	}
	select {
	case id := <-ran:
		if id != "job" || time.Now().Before(due) {
			t.Fatalf("ran %s at %s, due %s", id, time.Now().Format(time.StampMilli), due.Format(time.StampMilli))
		}
	case <-ctx.Done():
		t.Fatal("the task never ran")
	}
}

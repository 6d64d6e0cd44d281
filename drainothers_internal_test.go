package leasecron

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
)

// TestWorkersDrainQueuesAClientAdds: a client configured with three work
// queues sends to queues the workers (configured with one) do not know;
// the workers find them in the account and drain them, so nothing is
// stranded.
func TestWorkersDrainQueuesAClientAdds(t *testing.T) {
	saved := drainOthersEvery
	drainOthersEvery = 200 * time.Millisecond
	t.Cleanup(func() { drainOthersEvery = saved })

	srv := azuritetest.Shared(t)
	st := Storage{ConnectionString: srv.ConnectionString()}
	names := Names{ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c")}
	w, err := NewWorker(WorkerOptions{Storage: st, Names: names, InstanceID: "one-queue", Logger: slog.New(slog.DiscardHandler),
		Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]bool{}
	w.Handle("t", func(_ context.Context, task leasecrontype.Task) error {
		mu.Lock()
		ran[task.ID] = true
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	more := names
	more.Queues = 3
	c, err := NewClient(ClientOptions{Storage: st, Names: more})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 9 {
		id := fmt.Sprintf("spread-%d", i)
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "t", Due: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for {
		mu.Lock()
		n := 0
		for _, id := range ids {
			if ran[id] {
				n++
			}
		}
		mu.Unlock()
		if n == len(ids) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d tasks sent over three queues ran on a worker configured with one", n, len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

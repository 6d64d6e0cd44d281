package queue_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
)

// A consumer over in-memory queues: enqueue a task, handle it, shut down.
func ExampleConsumer() {
	work := queue.NewMemoryQueue("work", nil)
	poison := queue.NewMemoryQueue("poison", nil)

	c, err := queue.NewConsumerWith(work, poison, queue.ConsumerOptions{
		ConsumerSettings: queue.ConsumerSettings{Concurrency: 2, PollMin: 10 * time.Millisecond},
		InstanceID:       "example",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	c.Handle("greet", func(ctx context.Context, t leasecrontype.Task) error {
		fmt.Printf("hello, %s (task %s, attempt %d)\n", t.Payload, t.ID, t.Attempt)
		close(done)
		return nil
	})

	producer := queue.NewClientWith(work, poison, queue.ClientOptions{})
	if err := producer.Enqueue(context.Background(), queue.Envelope{ID: "greet-1", Type: "greet", Payload: "world"}, 0); err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- c.Run(ctx) }()
	<-done
	stop()
	if err := <-result; err != nil {
		fmt.Println(err)
	}
	fmt.Println("handled:", c.Stats().Total.Handled)
	// Output:
	// hello, world (task greet-1, attempt 1)
	// handled: 1
}

// memRecorder is a minimal RunRecorder: it keeps the latest record of each
// run in memory. (leasecron's Runs table is the one a worker uses.)
type memRecorder struct {
	mu   sync.Mutex
	runs map[string]leasecrontype.Run
}

func (m *memRecorder) Claim(_ context.Context, id, worker string, attempt int, until time.Time, meta leasecrontype.RunMeta) (leasecrontype.Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	switch {
	case r.State == leasecrontype.RunSucceeded:
		return r, leasecrontype.ErrRunSucceeded
	case r.State == leasecrontype.RunCancelled:
		return r, leasecrontype.ErrRunCancelled
	case r.State == leasecrontype.RunRunning && r.Worker != worker && r.ClaimUntil.After(time.Now()):
		return r, leasecrontype.ErrRunClaimed
	}
	r = leasecrontype.Run{ID: id, State: leasecrontype.RunRunning, Type: meta.Type, Due: meta.Due,
		Attempts: attempt, Worker: worker, Started: time.Now(), ClaimUntil: until}
	m.runs[id] = r
	return r, nil
}

func (m *memRecorder) Extend(_ context.Context, id, _ string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	r.ClaimUntil = until
	m.runs[id] = r
	return nil
}

func (m *memRecorder) Finish(_ context.Context, id string, state leasecrontype.RunState, err error, tail string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	r.State, r.OutputTail, r.Finished = state, tail, time.Now()
	if err != nil {
		r.LastError = err.Error()
	}
	m.runs[id] = r
	return nil
}

func (m *memRecorder) Snooze(_ context.Context, id string, until time.Time, tail string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	r.State, r.SnoozedUntil, r.OutputTail = leasecrontype.RunSnoozed, until, tail
	m.runs[id] = r
	return nil
}

// A consumer with run records: the recorder sees the claim and the
// outcome, with what the handler wrote to leasecrontype.Output; a second
// delivery of a run that succeeded is acknowledged without running.
func ExampleRunRecorder() {
	work, poison := queue.NewMemoryQueue("work", nil), queue.NewMemoryQueue("poison", nil)
	records := &memRecorder{runs: map[string]leasecrontype.Run{}}
	c, err := queue.NewConsumerWith(work, poison, queue.ConsumerOptions{ConsumerSettings: queue.ConsumerSettings{PollMin: 10 * time.Millisecond}, Runs: records})
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{}, 2)
	c.Handle("report", func(ctx context.Context, t leasecrontype.Task) error {
		fmt.Fprintf(leasecrontype.Output(ctx), "wrote report %s", t.Payload)
		ran <- struct{}{}
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- c.Run(ctx) }()

	env := queue.Envelope{ID: "report-7", Type: "report", Payload: "7"}
	_ = c.Client().Enqueue(ctx, env, 0)
	<-ran
	_ = c.Client().Enqueue(ctx, env, 0) // the same run delivered again
	for c.Stats().Total.Duplicates == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-result

	r := records.runs["report-7"]
	fmt.Println("run:", r.State, "output:", r.OutputTail)
	fmt.Println("handled:", c.Stats().Total.Handled, "duplicates:", c.Stats().Total.Duplicates)
	// Output:
	// run: succeeded output: wrote report 7
	// handled: 1 duplicates: 1
}

// Producing to and inspecting the Azure queues over a queue service client
// built with its own credential (needs a storage account or Azurite, so it
// is compile-only).
func ExampleNewClient() {
	svc, err := azqueue.NewServiceClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	client, err := queue.NewClient(svc, queue.ClientOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Visible in five minutes, never expires.
	env := queue.Envelope{ID: "report-42", Type: "report", Payload: `{"month":"2030-01"}`}
	if err := client.Enqueue(ctx, env, 5*time.Minute); err != nil {
		fmt.Println(err)
		return
	}
	dead := queue.NewDeadLetters(client, nil)
	letters, err := dead.List(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range letters {
		fmt.Println(d.ID(), d.Reason)
	}
}

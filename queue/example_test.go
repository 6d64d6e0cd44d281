package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
)

// A consumer over in-memory queues: enqueue a task, handle it, shut down.
func ExampleConsumer() {
	work := queue.NewMemQueue("work", nil)
	poison := queue.NewMemQueue("poison", nil)
	records := runs.NewMem(nil)

	c, err := queue.NewConsumerWith(work, poison, queue.ConsumerOptions{
		Concurrency: 2,
		Runs:        records,
		InstanceID:  "example",
		PollMin:     10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	c.Handle("greet", func(ctx context.Context, t leasecrontype.Task) error {
		fmt.Fprintf(leasecrontype.Output(ctx), "greeted %s", t.Payload)
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

	r, _ := records.Get(context.Background(), "greet-1")
	fmt.Println("run:", r.State, "output:", r.OutputTail)
	fmt.Println("handled:", c.Stats().Total.Handled)
	// Output:
	// hello, world (task greet-1, attempt 1)
	// run: succeeded output: greeted world
	// handled: 1
}

// A handler that captured its output elsewhere returns it with its error.
func ExampleWithOutput() {
	err := leasecrontype.WithOutput(errors.New("exit status 2"), "cannot open input.csv")
	fmt.Println(err)
	fmt.Println(leasecrontype.OutputOf(err))
	// Output:
	// exit status 2
	// cannot open input.csv
}

// Producing to and inspecting the Azure queues (needs a storage account or
// Azurite, so it is compile-only).
func ExampleClient() {
	sc, err := storage.New(storage.Config{ConnectionString: "UseDevelopmentStorage=true"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	client, err := queue.NewClient(sc, queue.ClientOptions{})
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

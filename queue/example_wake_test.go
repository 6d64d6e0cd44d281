package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
)

// A producer in the same process tells an idle consumer, which polls only
// every 30 s, when the delayed message it just enqueued becomes due; the
// handler starts then, not at the next poll.
func ExampleConsumer_WakeAt() {
	work, poison := queue.NewMemoryQueue("work", nil), queue.NewMemoryQueue("poison", nil)
	c, err := queue.NewConsumerWith(work, poison, queue.ConsumerOptions{
		ConsumerSettings: queue.ConsumerSettings{PollMin: 30 * time.Second, PollMax: 30 * time.Second, ShutdownGrace: time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	started := make(chan time.Time, 1)
	c.Handle("report", func(context.Context, leasecrontype.Task) error { started <- time.Now(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	delay := 300 * time.Millisecond
	due := time.Now().Add(delay)
	if err := c.Client().Enqueue(ctx, queue.Envelope{ID: "r1", Type: "report", Due: due}, delay); err != nil {
		fmt.Println(err)
		return
	}
	// Visible by now+delay at the latest.
	c.WakeAt(time.Now().Add(delay))

	at := <-started
	fmt.Println("started before due:", at.Before(due))
	fmt.Println("started within 5 s of due:", at.Sub(due) < 5*time.Second)
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// started before due: false
	// started within 5 s of due: true
	// stopped: <nil>
}

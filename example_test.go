package leasecron_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leasecron/leasecron"
)

// A worker with one handler. It needs a storage account (or Azurite:
// `leasecron azurite` prints a connection string), so this example is
// compiled but not run.
func ExampleNewWorker() {
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Handle("mail", func(ctx context.Context, t leasecron.Task) error {
		// Delivery is at least once: make this idempotent (e.g. key the
		// e-mail on t.ID).
		fmt.Printf("sending %s (attempt %d)\n", t.Payload, t.Attempt)
		return nil
	})
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	_ = w.Run(ctx) // returns after a graceful shutdown when ctx ends
}

// Scheduling from Go: a one-off task in an hour and a recurring series.
func ExampleClient_Schedule() {
	c, err := leasecron.NewClient(leasecron.ClientOptions{
		Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	it, err := c.Schedule(ctx, leasecron.Item{Type: "mail", Payload: `{"to":"ops@example.com"}`, Due: time.Now().Add(time.Hour)}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scheduled", it.ID)
	_, err = c.Schedule(ctx, leasecron.Item{ID: "nightly", Type: "report", Recurrence: "0 3 * * *", TZ: "Europe/Amsterdam", Due: time.Now()}, true)
	if err != nil {
		fmt.Println(err)
	}
}

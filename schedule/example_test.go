package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// printQueue prints what the mover sends.
type printQueue struct{}

func (printQueue) Enqueue(_ context.Context, env queue.Envelope, delay time.Duration) error {
	fmt.Printf("enqueue %s type=%s delay=%s\n", env.ID, env.Type, delay)
	return nil
}

func (printQueue) SetAside(_ context.Context, raw, reason string) error {
	fmt.Println("set aside:", reason)
	return nil
}

// stoppedClock stands still at one moment, so the example's output does not
// depend on when it runs; a program leaves Options.Clock nil (the real clock).
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time                           { return c.t }
func (stoppedClock) NewTimer(time.Duration) leasecrontype.Timer { return neverTimer{} }

type neverTimer struct{}

func (neverTimer) C() <-chan time.Time { return nil }
func (neverTimer) Stop() bool          { return true }

// A one-off task and a recurring series, moved by one pass of the Mover (on
// the in-memory table and a fake clock).
func ExampleMover() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := stoppedClock{time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	quiet := slog.New(slog.DiscardHandler)
	c, _ := schedule.NewMemory(schedule.Options{Clock: fc, Logger: quiet})
	_, _ = c.Add(ctx, schedule.Item{ID: "hello", Due: fc.Now(), Payload: `{"to":"world"}`, Type: "greet"}, schedule.AddOptions{})
	_, _ = c.Add(ctx, schedule.Item{ID: "beat", Due: fc.Now().Add(2 * time.Second), Recurrence: "@every 1h"}, schedule.AddOptions{})

	m, _ := schedule.NewMover(c, schedule.MoverOptions{
		MoverSettings: schedule.MoverSettings{Concurrency: 1},
		Generation:    func() int64 { return 1 },
		Enqueuer:      printQueue{},
		SetAside:      printQueue{},
		Clock:         fc,
		Logger:        quiet,
		// Stop after the first committed batch (a real mover runs until its
		// leader context ends).
		OnMoved: func(context.Context, []queue.Envelope) { cancel() },
	})
	_ = m.Run(ctx)

	next, _ := c.Get(context.Background(), "beat")
	fmt.Println("beat next due", next.Due.Format(time.RFC3339))
	// Output:
	// enqueue hello type=greet delay=0s
	// enqueue beat@2025-01-01T12:00:02Z type=default delay=2s
	// beat next due 2025-01-01T13:00:02Z
}

func ExampleParseWhen() {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at, _ := schedule.ParseWhen("2025-01-02T09:30:00+01:00", "", now)
	in, _ := schedule.ParseWhen("", "90m", now)
	_, err := schedule.ParseWhen("2025-01-02 09:30", "", now)
	fmt.Println(at)
	fmt.Println(in)
	fmt.Println(err)
	// Output:
	// 2025-01-02 08:30:00 +0000 UTC
	// 2025-01-01 13:30:00 +0000 UTC
	// invalid: time "2025-01-02 09:30" is not RFC 3339; want e.g. 2025-01-02T15:04:05Z or 2025-01-02T16:04:05+01:00
}

// Scheduling against a storage account (compile-only: it needs Azure or
// Azurite).
func ExampleNewAzure() {
	ctx := context.Background()
	conn := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	tables, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Payloads over 24 KiB go to blobs in the "leasecron" container.
	blobs, err := container.NewClientFromConnectionString(conn, "leasecron", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := schedule.NewPayloadStore(blobs)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := schedule.NewAzure(tables, schedule.Options{PayloadStore: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Ensure(ctx); err != nil {
		fmt.Println(err)
		return
	}
	due, _ := schedule.ParseWhen("", "10m", time.Now())
	it, err := c.Add(ctx, schedule.Item{Type: "report", Payload: `{"month":"2025-01"}`, Due: due}, schedule.AddOptions{})
	fmt.Println(it.ID, err)
}

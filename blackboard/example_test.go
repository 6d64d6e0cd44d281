package blackboard_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/leasecrontype"
)

// stoppedClock is a leasecrontype.Clock that stands still, as a test clock
// would between steps.
type stoppedClock struct{ now time.Time }

func (c stoppedClock) Now() time.Time                             { return c.now }
func (c stoppedClock) NewTimer(time.Duration) leasecrontype.Timer { return stoppedTimer{} }

type stoppedTimer struct{}

func (stoppedTimer) C() <-chan time.Time { return nil }
func (stoppedTimer) Stop() bool          { return true }

// The blackboard on the in-memory store: add a key, let a worker make one
// pass, and print the snapshot the `blackboard` command shows.
func Example() {
	ctx := context.Background()
	store := blackboard.NewMemoryStore()
	board := blackboard.NewBoardWithStore(store)
	_ = board.Add(ctx, blackboard.Entry{Key: "westlafcals", Interval: 8 * time.Hour, Type: "calendar",
		Payload: `{"feeds": ["http://example.com/a.ics"]}`}, nil)

	start := time.Date(2009, 7, 14, 12, 12, 5, 0, time.UTC)
	clk := stoppedClock{start}
	w, err := blackboard.NewWorkerWithStore(store, blackboard.Options{
		InstanceID: "worker-1",
		Clock:      clk,
		Handlers: func(typ string) (leasecrontype.Handler, bool) {
			return func(_ context.Context, t leasecrontype.Task) error {
				fmt.Println("running", t.ID)
				return nil
			}, typ == "calendar"
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = w.RunOnce(ctx)

	rows, _ := board.List(ctx)
	for _, e := range rows {
		fmt.Printf("%s: %s, start %s, worker %s, runs %d, next due %s\n", e.Key, e.State(clk.Now()),
			e.Start.Format(time.TimeOnly), e.Worker, e.Runs, e.NextDue().Format(time.TimeOnly))
	}
	// Output:
	// running westlafcals@2009-07-14T12:12:05Z
	// westlafcals: waiting, start 12:12:05, worker worker-1, runs 1, next due 20:12:05
}

// A worker over the real table, on a table service client built with its
// own credential (compile-only: it needs a storage account).
func ExampleNewWorker() {
	svc, err := aztables.NewServiceClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := blackboard.NewWorker(svc, blackboard.Options{
		Settings: blackboard.Settings{
			Cycle:   time.Hour, // blackboard.cycle
			LockTTL: 0,         // blackboard.lock_ttl: 0 = each key's interval
		},
		Handlers: registryLookup,     // the queue's handler registry
		Hooks:    blackboard.Hooks{}, // metrics
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = w.Run(ctx) // blocks until ctx ends
}

func registryLookup(string) (leasecrontype.Handler, bool) { return nil, false }

// Operator commands map onto Board calls.
func ExampleBoard() {
	ctx := context.Background()
	board := blackboard.NewBoardWithStore(blackboard.NewMemoryStore())
	e := blackboard.Entry{Key: "localist", Interval: time.Hour, Type: "calendar"}
	fmt.Println(board.Add(ctx, e, nil))
	fmt.Println(board.Add(ctx, e, nil)) // the same definition again: done already
	e.Interval = 8 * time.Hour
	fmt.Println(board.Add(ctx, e, nil))
	fmt.Println(board.Add(ctx, e, &blackboard.AddOptions{Replace: true}))
	fmt.Println(board.RunNow(ctx, "localist"))
	fmt.Println(board.Remove(ctx, "aroundfred"))
	// Output:
	// <nil>
	// <nil>
	// blackboard key already exists: "localist" is already on the blackboard (in-memory store; replace it to change its definition)
	// <nil>
	// <nil>
	// blackboard key not found: "aroundfred" is not on the blackboard (in-memory store): read blackboard row "aroundfred": read Blackboard/bb/aroundfred: not found
}

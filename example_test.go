package leasecron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/leasecrontype"
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
	it, err := c.Schedule(ctx, leasecron.Item{Type: "mail", Payload: `{"to":"ops@example.com"}`, Due: time.Now().Add(time.Hour)}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scheduled", it.ID)
	_, err = c.Schedule(ctx, leasecron.Item{ID: "nightly", Type: "report", Recurrence: "0 3 * * *", TZ: "Europe/Amsterdam", Due: time.Now()}, &leasecron.ScheduleOptions{Replace: true})
	if err != nil {
		fmt.Println(err)
	}
}

// A unique task: one invoice run per customer at a time, and none within
// an hour after the last one finished. A refusal is not a failure: it names
// the task that holds the key. (Compiled, not run: it needs an account.)
func ExampleClient_Schedule_unique() {
	c, err := leasecron.NewClient(leasecron.ClientOptions{
		Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	it, err := c.Schedule(context.Background(), leasecron.Item{Type: "invoice", Payload: `{"customer":7}`, Due: time.Now()},
		&leasecron.ScheduleOptions{Unique: &leasecron.Unique{Key: "customer-7", For: time.Hour}})
	var dup *leasecron.DuplicateError
	switch {
	case errors.As(err, &dup):
		fmt.Println("already there:", dup.ID)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("scheduled", it.ID)
	}
}

// A worker that starts at most 10 SMS a minute across the fleet, and at
// most 100 invoices an hour per customer. (Compiled, not run.)
func ExampleWorkerOptions_rates() {
	sms, err := leasecron.ParseRateLimit("10/1m")
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")},
		Rates: map[string]leasecron.RateLimit{
			"sms":     sms,
			"invoice": {Count: 100, Per: time.Hour, Key: "payload.customer"},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = w
}

// A worker pool: this worker takes the "gpu" queue besides the default
// one; renders go there, password resets go first, and each tenant's
// tasks take turns with the others' (tenant-42 three turns to one).
// Clients need the same Routing. The route of a pending task is shown
// without contacting storage.
func ExampleWorkerOptions_routing() {
	routing := leasecron.Routing{
		Types: map[string]leasecron.Route{
			"render":         {Queue: "gpu"},
			"reset-password": {Priority: leasecron.PriorityCritical},
		},
		FairWeights: map[string]int{"tenant-42": 3},
	}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"},
		Routing: routing,
		Queues:  []string{"default", "gpu"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(w.Client().RouteOf(leasecron.Item{Type: "render"}))
	fmt.Println(w.Client().RouteOf(leasecron.Item{Type: "reset-password"}))
	fmt.Println(w.Client().RouteOf(leasecron.Item{Type: "mail", Priority: leasecron.PriorityLow}))
	// Output:
	// gpu/3
	// default/1
	// default/4
}

// A handler is a plain function, so it can be tested without storage: give
// it a Task and a context whose Output is a buffer (the worker gives every
// handler such a context and keeps the end of what it writes in the run
// record).
func ExampleHandler() {
	var greet leasecron.Handler = func(ctx context.Context, t leasecron.Task) error {
		var p struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return fmt.Errorf("task %s: payload is not a greeting: %w", t.ID, err)
		}
		fmt.Fprintf(leasecrontype.Output(ctx), "hello, %s", p.Name)
		return nil
	}

	var out strings.Builder
	ctx := leasecrontype.WithOutputWriter(context.Background(), &out)
	err := greet(ctx, leasecron.Task{ID: "t1", Type: "greet", Payload: []byte(`{"name":"Ada"}`), Attempt: 1})
	fmt.Printf("err=%v output=%q\n", err, out.String())
	err = greet(ctx, leasecron.Task{ID: "t2", Type: "greet", Payload: []byte(`not json`), Attempt: 1})
	fmt.Println(err != nil)
	// Output:
	// err=<nil> output="hello, Ada"
	// true
}

// What became of a task: its pending row, its run record, or
// ErrNotFound. Compile-only (it needs a storage account).
func ExampleClient_Status() {
	c, err := leasecron.NewClient(leasecron.ClientOptions{
		Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := c.Status(context.Background(), "invoice-42")
	switch {
	case errors.Is(err, leasecron.ErrNotFound):
		fmt.Println("no such task")
	case err != nil:
		fmt.Println(err)
	case s.Run != nil && s.Run.State == leasecron.RunFailed:
		fmt.Printf("attempt %d failed: %s\n", s.Run.Attempts, s.Run.LastError)
	case s.Run != nil && s.Run.State.Finished():
		fmt.Printf("%s on %s; output: %s\n", s.Run.State, s.Run.Worker, s.Run.OutputTail)
	default:
		fmt.Println(s.State())
	}
}

// Fleet-wide numbers and the storage requests one worker made in an
// interval (Azure bills each request). Compile-only.
func ExampleWorker_Requests() {
	st := leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	go func() { _ = w.Run(ctx) }()

	time.Sleep(time.Minute) // warm up
	before := w.Requests()
	time.Sleep(time.Minute)
	idle := w.Requests().Sub(before)
	fmt.Printf("%d requests in a minute: %v\n", idle.Total, idle.ByOp)

	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := c.Stats(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("leader %s (generation %d), queue depth %d\n", s.Leader.Holder, s.Leader.Generation, s.QueueDepth)
	if s.Counters != nil {
		fmt.Printf("%d handled, %d failed attempts across %d workers\n", s.Counters.Total.Handled, s.Counters.Total.Failed, s.Counters.Instances)
	}
}

// A handler reports how far it has come. The worker gives every handler a
// context that takes the reports (and writes the latest at most every
// worker.progress_every); here leasecrontype.WithProgressFunc stands in
// for it, the way a handler's unit test can look at its reports.
func ExampleProgress() {
	importFiles := func(ctx context.Context, t leasecron.Task) error {
		files := []string{"a.csv", "b.csv", "c.csv", "d.csv"}
		for i, f := range files {
			// ... copy f ...
			if err := leasecron.Progress(ctx, (i+1)*100/len(files), "copied "+f); err != nil {
				return err
			}
		}
		return nil
	}
	ctx := leasecrontype.WithProgressFunc(context.Background(), func(p leasecron.RunProgress) {
		fmt.Printf("%d%% %s\n", p.Percent, p.Message)
	})
	if err := importFiles(ctx, leasecron.Task{ID: "import-1", Type: "import"}); err != nil {
		fmt.Println(err)
	}
	err := leasecron.Progress(ctx, 150, "too far")
	fmt.Println(errors.Is(err, leasecron.ErrInvalidProgress), err)
	// Output:
	// 25% copied a.csv
	// 50% copied b.csv
	// 75% copied c.csv
	// 100% copied d.csv
	// true invalid progress: percent 150: want 0 to 100
}

// Command worker is a leasecron worker with a custom Go handler, written
// only against leasecron's documented public API (this module is not
// github.com/leasecron/leasecron, so the compiler refuses its internal
// packages).
//
// It schedules a few tasks with a Client, runs a Worker whose handler for
// the type "greet" prints a greeting, waits until every task's run record
// says succeeded, prints each task's state and output, and stops the
// worker gracefully.
//
//	export AZURE_STORAGE_CONNECTION_STRING='...'   # `leasecron azurite` prints one
//	go run ./worker -tasks 3
//
// Every line it prints on stdout is meant to be read (the examples test
// does): "scheduled ID", "handled ID attempt N: hello, NAME",
// "ID succeeded: hello, NAME", "all N tasks succeeded". Logs go to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// greeting is the payload of a "greet" task.
type greeting struct {
	Name string `json:"name"`
}

// greet is the custom handler. Delivery is at least once, so it must be
// idempotent: printing a greeting twice is harmless.
func greet(ctx context.Context, t leasecron.Task) error {
	var g greeting
	if err := json.Unmarshal(t.Payload, &g); err != nil {
		// A failed attempt: retried with backoff, then set aside.
		return fmt.Errorf("payload of %s is not a greeting: %w", t.ID, err)
	}
	msg := "hello, " + g.Name
	// What a handler writes to Output is kept in the run record.
	fmt.Fprint(leasecrontype.Output(ctx), msg)
	fmt.Printf("handled %s attempt %d: %s\n", t.ID, t.Attempt, msg)
	return nil
}

func run() error {
	n := flag.Int("tasks", 3, "how many tasks to schedule (the last one is due 2 s later than the others)")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up if the tasks have not all succeeded by then")
	flag.Parse()
	if *n < 1 {
		return fmt.Errorf("-tasks %d: want at least 1", *n)
	}
	conn := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if conn == "" {
		return errors.New("AZURE_STORAGE_CONNECTION_STRING is empty: set it to a storage connection string (for Azurite, the one `leasecron azurite` prints)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := leasecron.Storage{ConnectionString: conn}

	// Schedule: the Client needs no running worker; the tasks wait in the
	// schedule table until a leader moves them.
	client, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Logger: logger})
	if err != nil {
		return err
	}
	names := []string{"Ada", "Grace", "Edsger", "Barbara", "Leslie"}
	ids := make([]string, *n)
	for i := range ids {
		payload, err := json.Marshal(greeting{Name: names[i%len(names)]})
		if err != nil {
			return err
		}
		due := time.Now()
		if i == *n-1 {
			due = due.Add(2 * time.Second)
		}
		it, err := client.Schedule(ctx, leasecron.Item{Type: "greet", Payload: string(payload), Due: due}, nil)
		if err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
		ids[i] = it.ID
		fmt.Printf("scheduled %s due %s\n", it.ID, it.Due.Format(time.RFC3339))
	}

	// Work: one worker leads (moves due tasks into the queue) and consumes.
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st,
		Mover:   schedule.MoverSettings{PollEvery: time.Second},
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	w.Handle("greet", greet)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	// Watch the run records until every task has succeeded.
	pending := map[string]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	for len(pending) > 0 {
		for _, id := range ids {
			if !pending[id] {
				continue
			}
			s, err := client.Status(ctx, id)
			if err != nil {
				continue // not readable yet, or a transient error: look again
			}
			if s.Run != nil && s.Run.State == leasecron.RunSucceeded {
				fmt.Printf("%s %s: %s\n", id, s.State(), s.Run.OutputTail)
				delete(pending, id)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d tasks had not succeeded when the wait ended: %w", len(pending), *n, context.Cause(ctx))
		case err := <-done:
			return fmt.Errorf("worker stopped early: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("all %d tasks succeeded\n", *n)

	// Graceful shutdown: finish in-flight tasks, release the lease.
	stopWorker()
	return <-done
}

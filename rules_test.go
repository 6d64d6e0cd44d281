package leasecron_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leasecron/leasecron"
)

// A handler registered for a type that cannot be scheduled would never run:
// the worker refuses to start with one, and refuses a limit on one, naming
// the type — before it touches storage.
func TestWorkerRefusesTypesOutsideTheRule(t *testing.T) {
	st := leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"}
	_, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st, Limits: map[string]int{"Report.Daily": 2}})
	if err == nil || !strings.Contains(err.Error(), `"Report.Daily"`) || !strings.Contains(err.Error(), "Limits") {
		t.Errorf("NewWorker with Limits[Report.Daily]: %v, want an error naming the type", err)
	}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("report", func(context.Context, leasecron.Task) error { return nil })
	w.Handle("Report.Daily", func(context.Context, leasecron.Task) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run must fail on the type, not on storage
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `"Report.Daily"`) || strings.Contains(err.Error(), `"report"`) {
		t.Errorf("Run with a handler for Report.Daily: %v, want an error naming that type only", err)
	}
}

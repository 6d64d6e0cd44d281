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

// Storage.ContainerClient builds a client of the named container in the
// configured account, and refuses a name the service would refuse.
func TestStorageContainerClient(t *testing.T) {
	st := leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"}
	cc, err := st.ContainerClient("calendars")
	if err != nil || !strings.HasSuffix(cc.URL(), "/devstoreaccount1/calendars") {
		t.Fatalf("ContainerClient(calendars) = %v, %v", cc, err)
	}
	if _, err := st.ContainerClient("Bad_Name"); err == nil || !strings.Contains(err.Error(), "Bad_Name") {
		t.Errorf("ContainerClient(Bad_Name) = %v, want an error naming it", err)
	}
	if _, err := (leasecron.Storage{}).ContainerClient("calendars"); err == nil {
		t.Error("ContainerClient without an account: no error")
	}
}

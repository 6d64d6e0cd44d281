package leasecron

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/schedule"
)

// A guard whose task cannot be told pending or not — a row written by
// another language, without an id index, further into a schedule than the
// lookup's scan reads (Options.ScanLimit) — is kept, and the key is not
// taken over: before, the scan's giving up read as "not pending", the
// sweep deleted the guard and a second task took the key while the first
// was still pending (a review's find). A guard naming an id no task can
// have (another language's "o'brien") holds nothing: before, the run
// store's refusal of the id failed the check every time, which stopped
// the shard's sweep and kept the key for good.
func TestAGuardIsKeptWhenItsTaskCannotBeFound(t *testing.T) {
	ctx := t.Context()
	ms := memstore.New(memstore.Options{})
	opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ms.Transport()}}
	svc, err := aztables.NewServiceClientFromConnectionString(ms.ConnectionString(), opts)
	if err != nil {
		t.Fatal(err)
	}
	clk, _, rs := keyFixture(t)
	sched, err := schedule.NewAzure(svc, schedule.Options{Clock: clk, ScanLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	first, err := sched.Add(ctx, schedule.Item{ID: "first", Type: "t", Due: clk.Now()}, schedule.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Another language's rows, no id index: 1,000 due before the task the
	// guard names (one page of the scan, past its limit), then that task.
	tc := svc.NewClient(schedule.DefaultTable)
	put := func(due time.Time, id string) {
		t.Helper()
		rk, err := schedule.RowKey(due, id)
		if err != nil {
			t.Fatal(err)
		}
		ent := fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q,"Message":"","Type":"t"}`, first.Shard, rk)
		if _, err := tc.AddEntity(ctx, []byte(ent), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		put(clk.Now().Add(time.Duration(i)*time.Second), fmt.Sprintf("backlog-%04d", i))
	}
	put(clk.Now().Add(2*time.Hour), "direct-1")
	if _, err := sched.Get(ctx, "direct-1"); !errors.Is(err, schedule.ErrScanGaveUp) {
		t.Fatalf("lookup past the scan limit: %v; want ErrScanGaveUp", err)
	}

	g := schedule.Guard{Type: "t", Key: "k", Task: "direct-1", Created: clk.Now()}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err == nil || held {
		t.Errorf("holdsKey of a task the scan gave up on: %v, %v; want an error (no answer)", held, err)
	}
	if kept, err := keepsGuard(ctx, sched, rs, clk.Now(), g); err == nil || kept {
		t.Errorf("keepsGuard of a task the scan gave up on: %v, %v; want an error, so that the sweep leaves the guard", kept, err)
	}

	bad := schedule.Guard{Type: "t", Key: "q", Task: "o'brien", Created: clk.Now()}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), bad); err != nil || held {
		t.Errorf("holdsKey of a guard naming %q: %v, %v; want not held, no error", bad.Task, held, err)
	}
	if kept, err := keepsGuard(ctx, sched, rs, clk.Now(), bad); err != nil || kept {
		t.Errorf("keepsGuard of a guard naming %q: %v, %v; want not kept, no error", bad.Task, kept, err)
	}
}

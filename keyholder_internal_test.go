package leasecron

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/schedule"
)

// In a schedule past the lookup's scan limit (Options.ScanLimit), a task
// leasecron moved — its id index row gone with its row — is looked up by
// a scan that gives up; its run record decides whether it holds its key,
// and one that succeeded frees it (a review's find: a first fix that took
// the giving up for no answer kept every ended task's key in a large
// schedule). A guard naming an id no task can have (another language's
// "o'brien") holds nothing: before, the run store's refusal of the id
// failed the check every time, which stopped the shard's sweep and kept
// the key for good.
func TestAGuardOfAnEndedOrImpossibleTaskHoldsNothing(t *testing.T) {
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
	// Another language's rows, no id index: 1,001 of them, more than a page of
	// the scan, past its limit.
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
	for i := range 1001 {
		put(clk.Now().Add(time.Duration(i)*time.Second), fmt.Sprintf("backlog-%04d", i))
	}

	// first is moved (its rows go) and succeeds.
	if _, err := sched.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Claim(ctx, first.ID, "w1", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: first.Due, Queued: true}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Finish(ctx, first.ID, runs.Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := sched.Get(ctx, first.ID); !errors.Is(err, schedule.ErrScanGaveUp) {
		t.Fatalf("lookup of a moved task past the scan limit: %v; want ErrScanGaveUp", err)
	}
	g := schedule.Guard{Type: "t", Key: "k", Task: first.ID, Created: clk.Now(), States: schedule.DefaultUniqueStates}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("holdsKey of a task that succeeded, past the scan limit: %v, %v; want not held, no error", held, err)
	}
	if kept, err := keepsGuard(ctx, sched, rs, clk.Now(), g); err != nil || kept {
		t.Errorf("keepsGuard of a task that succeeded, past the scan limit: %v, %v; want not kept, no error", kept, err)
	}

	// A requeued occurrence of a unique series takes the key as its run
	// id, "series@due": its record decides (a review found a first fix
	// that took it for an impossible id, holding nothing, while it ran).
	occ := "nightly@2026-03-01T12:00:00Z"
	if _, err := rs.Claim(ctx, occ, "w1", 1, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: clk.Now(), Queued: true}); err != nil {
		t.Fatal(err)
	}
	running := schedule.Guard{Type: "t", Key: "n", Task: occ, Created: clk.Now(), States: schedule.DefaultUniqueStates}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), running); err != nil || !held {
		t.Errorf("holdsKey of a running series occurrence: %v, %v; want held", held, err)
	}

	bad := schedule.Guard{Type: "t", Key: "q", Task: "o'brien", Created: clk.Now()}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), bad); err != nil || held {
		t.Errorf("holdsKey of a guard naming %q: %v, %v; want not held, no error", bad.Task, held, err)
	}
	if kept, err := keepsGuard(ctx, sched, rs, clk.Now(), bad); err != nil || kept {
		t.Errorf("keepsGuard of a guard naming %q: %v, %v; want not kept, no error", bad.Task, kept, err)
	}
}

// A dead task whose guard was written after its death is a requeue of its
// dead letter under way (Retake takes the key before the requeue marks the
// run queued again): it holds its key, whatever its states, for up to
// IndexingHold. Before, a schedule in that gap found the task dead and
// took the key over, and both tasks ran (issue 38, sweep seed 136364).
func TestADeadTaskWhoseKeyARequeueTookHoldsIt(t *testing.T) {
	ctx := t.Context()
	clk, sched, rs := keyFixture(t)
	const id = "dies"
	if _, err := rs.Claim(ctx, id, "w1", 3, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: clk.Now(), Queued: true}); err != nil {
		t.Fatal(err)
	}
	scheduledAt := clk.Now().Add(-time.Minute)
	if err := rs.Finish(ctx, id, runs.Dead, errors.New("failed"), ""); err != nil {
		t.Fatal(err)
	}
	states := []RunState{RunScheduled, RunQueued, RunRunning}
	g := schedule.Guard{Type: "t", Key: "k", Task: id, Created: scheduledAt, States: states}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("the guard of its scheduling, after its death: held %v, %v; want not held", held, err)
	}
	clk.Advance(time.Minute)
	g.Created = clk.Now() // a requeue took it
	clk.Advance(5 * time.Second)
	for _, f := range []func(context.Context, *schedule.Client, *runs.Store, time.Time, schedule.Guard) (bool, error){holdsKey, keepsGuard} {
		if held, err := f(ctx, sched, rs, clk.Now(), g); err != nil || !held {
			t.Errorf("retaken 5 s ago by a requeue: held %v, %v; want held", held, err)
		}
	}
	clk.Advance(schedule.IndexingHold)
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("retaken by a requeue that never marked the run, past IndexingHold: held %v, %v; want not held", held, err)
	}
}

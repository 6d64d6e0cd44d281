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

// A dead task whose guard a requeue took, which its run record does not
// list yet, is a requeue under way (Retake takes the key before the
// requeue marks the run queued again): it holds its key, whatever its
// states, for up to IndexingHold — whatever the clocks of the requeuer
// and the worker that recorded the death. Before, a schedule in that gap
// found the task dead and took the key over, and both tasks ran (issue
// 38, sweep seed 136364); a first fix compared the guard's time with the
// death's, two hosts' clocks (a review's find).
func TestADeadTaskWhoseKeyARequeueTookHoldsIt(t *testing.T) {
	ctx := t.Context()
	clk, sched, rs := keyFixture(t)
	const id = "dies"
	due := clk.Now()
	rsToken := ""
	die := func() {
		t.Helper()
		if _, err := rs.Claim(ctx, id, "w1", 3, clk.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due, Queued: true, Token: rsToken}); err != nil {
			t.Fatal(err)
		}
		if err := rs.Finish(ctx, id, runs.Dead, errors.New("failed"), ""); err != nil {
			t.Fatal(err)
		}
	}
	die()
	states := []RunState{RunScheduled, RunQueued, RunRunning}
	g := schedule.Guard{Type: "t", Key: "k", Task: id, Created: clk.Now().Add(-time.Minute), States: states}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("the guard of its scheduling, after its death: held %v, %v; want not held", held, err)
	}
	const death = "msg-1-5"
	g.Requeue = runs.RequeueToken(death)
	g.Created = clk.Now().Add(-30 * time.Second) // the requeuer's clock behind the worker's
	clk.Advance(5 * time.Second)
	for _, f := range []func(context.Context, *schedule.Client, *runs.Store, time.Time, schedule.Guard) (bool, error){holdsKey, keepsGuard} {
		if held, err := f(ctx, sched, rs, clk.Now(), g); err != nil || !held {
			t.Errorf("taken by a requeue under way: held %v, %v; want held", held, err)
		}
	}
	// The requeue marks the run queued: held as any queued task; then the
	// task dies again, and the requeue's take no longer holds anything.
	if _, _, err := rs.MarkRequeued(ctx, id, runs.Meta{Type: "t", Due: due, Token: g.Requeue}, death, ""); err != nil {
		t.Fatal(err)
	}
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || !held {
		t.Errorf("requeued, queued: held %v, %v; want held", held, err)
	}
	rsToken = g.Requeue // the requeue's message takes the run
	die()
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("dead again after the requeue: held %v, %v; want not held", held, err)
	}
	// A requeue that never marked the run lets the key go after
	// IndexingHold.
	g.Requeue = runs.RequeueToken("msg-2-5")
	clk.Advance(schedule.IndexingHold)
	if held, err := holdsKey(ctx, sched, rs, clk.Now(), g); err != nil || held {
		t.Errorf("taken by a requeue that never marked the run, past IndexingHold: held %v, %v; want not held", held, err)
	}
}

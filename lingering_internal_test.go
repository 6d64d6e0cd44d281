package leasecron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/runs"
)

// A traffic-cop pass sends a one-off row's message before it retires the
// row (or, sent early, before it marks it sent); a pass stopped between
// the two leaves a row that looks pending, unmarked, behind a message that
// ran. Once that run has ended, cancel refuses the task as one that died
// (README: exit 1) instead of answering that it removed a pending task,
// and reschedule and run-now refuse it as no longer pending (exit 3)
// instead of running it all over again (issue 38, simulator row 113, seed
// 50023: a mover frozen after its early send; the task died, and a
// reschedule ran all its attempts a second time). An ended run of an
// earlier scheduling of the id, of another due time, stands in the way
// of none of them.
func TestChangesOfARowLeftBehindARunThatEnded(t *testing.T) {
	ctx := context.Background()
	ms := memstore.New(memstore.Options{})
	// The client leaves every task to the traffic cop (SendWithin −1):
	// the rows, due already, stay unmarked.
	c, err := NewClient(ClientOptions{Storage: Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}, SendWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	for _, id := range []string{"died", "died2", "ranbefore", "ranbefore2"} {
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "t", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
	}
	end := func(id string, due time.Time, state runs.State) {
		t.Helper()
		if _, err := c.runs.Claim(ctx, id, "w1", 1, time.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due}); err != nil {
			t.Fatal(err)
		}
		if err := c.runs.Finish(ctx, id, state, errors.New("it fails"), ""); err != nil {
			t.Fatal(err)
		}
	}
	// The rows' messages ran and died; the rows still stand, unmarked.
	end("died", due, runs.Dead)
	end("died2", due, runs.Dead)
	// Earlier schedulings of these ids, due a minute before, succeeded.
	end("ranbefore", due.Add(-time.Minute), runs.Succeeded)
	end("ranbefore2", due.Add(-time.Minute), runs.Succeeded)

	if res, err := c.Cancel(ctx, "died"); !errors.Is(err, ErrAlreadyFinished) || res.Removed {
		t.Errorf("cancel of a task whose run died behind its row: %+v, %v; want refused, ErrAlreadyFinished", res, err)
	}
	if _, err := c.Reschedule(ctx, "died2", due.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("reschedule of a task whose run died behind its row: %v, want ErrNotFound", err)
	}
	if _, err := c.RunNow(ctx, "died2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("run-now of a task whose run died behind its row: %v, want ErrNotFound", err)
	}
	if s, err := c.Status(ctx, "died2"); err != nil || s.Run == nil || s.Run.State != RunDead {
		t.Errorf("status after the refused changes: %+v, %v; want its run dead", s.Run, err)
	}

	// An earlier release's record knows no due time: it is not this
	// task's run (a review found cancel refused the task for it).
	for _, id := range []string{"legacy", "legacy2"} {
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "t", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
		end(id, time.Time{}, runs.Dead)
	}
	if res, err := c.Cancel(ctx, "legacy"); err != nil || !res.Removed {
		t.Errorf("cancel of a pending task beside an earlier release's record: %+v, %v; want removed", res, err)
	}
	if s, err := c.Status(ctx, "legacy2"); err != nil || s.Run != nil || s.State() != string(runs.Scheduled) {
		t.Errorf("status of a pending task beside an earlier release's record: %+v, %v; want scheduled, no run", s, err)
	}
	// A series whose id a one-off task used before, which succeeded: its
	// cancel succeeds (the review's other find).
	end("report", due.Add(-time.Hour), runs.Succeeded)
	if _, err := c.Schedule(ctx, Item{ID: "report", Type: "t", Due: due, Recurrence: "@every 1h"}, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Cancel(ctx, "report"); err != nil || !res.Removed {
		t.Errorf("cancel of a series whose id an earlier one-off task used: %+v, %v; want removed", res, err)
	}

	if res, err := c.Cancel(ctx, "ranbefore"); err != nil || !res.Removed {
		t.Errorf("cancel of a pending task whose id ran before: %+v, %v; want removed", res, err)
	}
	if it, err := c.Reschedule(ctx, "ranbefore2", due.Add(time.Hour)); err != nil || !it.Due.Equal(due.Add(time.Hour)) {
		t.Errorf("reschedule of a pending task whose id ran before: %+v, %v", it, err)
	}
}

package runs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// snoozeBehaviour: a snooze keeps attempts and the last error, shows the
// run snoozed until a time (stored with the record, listed under its
// state), costs one write, and the next claim takes it like any waiting
// run.
func snoozeBehaviour(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	id := "report-7"
	due := e.now().Truncate(time.Second)
	if _, err := s.Claim(ctx, id, "w1", 1, e.now().Add(time.Minute), Meta{Type: "report", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, id, Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, id, "w1", 2, e.now().Add(time.Minute), Meta{Due: due}); err != nil {
		t.Fatal(err)
	}
	until := e.now().Add(10 * time.Minute).UTC().Truncate(time.Second)
	e.wantCost(t, "a snooze", 1, func() {
		if err := s.Snooze(ctx, id, until, "input not there yet"); err != nil {
			t.Fatal(err)
		}
	})
	r := e.mustState(t, id, Snoozed)
	if !r.SnoozedUntil.Equal(until) || r.Attempts != 2 || r.LastError != "boom" || r.OutputTail != "input not there yet" || r.ClaimUntil.After(e.now()) {
		t.Fatalf("snoozed run = %+v", r)
	}
	if p, err := s.Query(ctx, Query{State: Snoozed}); err != nil || len(p.Runs) != 1 || !p.Runs[0].SnoozedUntil.Equal(until) {
		t.Fatalf("snoozed runs = %+v, %v", p.Runs, err)
	}
	c, err := s.Claim(ctx, id, "w2", 2, e.now().Add(time.Minute), Meta{Due: due})
	if err != nil || c.State != Running || c.Worker != "w2" {
		t.Fatalf("claim after the snooze = %+v, %v", c, err)
	}
	e.verify(t)
}

func TestMemSnooze(t *testing.T) { snoozeBehaviour(t, memEnv(t)) }

func TestStoreSnooze(t *testing.T) {
	t.Parallel()
	snoozeBehaviour(t, azureEnv(t, Options{}))
}

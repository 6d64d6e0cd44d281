package runs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// snoozer is the part of Store and Mem the snooze test uses.
type snoozer interface {
	api
	Snooze(ctx context.Context, id string, until time.Time, outputTail string) error
}

// snoozeBehaviour: a snooze keeps attempts and the last error, shows the
// run snoozed until a time (stored with the row), and the next claim takes
// it like any waiting run.
func snoozeBehaviour(t *testing.T, s snoozer, now func() time.Time) {
	ctx := context.Background()
	id := "report-7"
	if _, err := s.Claim(ctx, id, "w1", 1, now().Add(time.Minute), Meta{Type: "report"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, id, Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, id, "w1", 2, now().Add(time.Minute), Meta{}); err != nil {
		t.Fatal(err)
	}
	until := now().Add(10 * time.Minute).UTC().Truncate(time.Second)
	if err := s.Snooze(ctx, id, until, "input not there yet"); err != nil {
		t.Fatal(err)
	}
	r := mustState(t, s, id, Snoozed)
	if !r.SnoozedUntil.Equal(until) || r.Attempts != 2 || r.LastError != "boom" || r.OutputTail != "input not there yet" || r.ClaimUntil.After(now()) {
		t.Fatalf("snoozed run = %+v", r)
	}
	c, err := s.Claim(ctx, id, "w2", 2, now().Add(time.Minute), Meta{})
	if err != nil || c.State != Running || c.Worker != "w2" {
		t.Fatalf("claim after the snooze = %+v, %v", c, err)
	}
}

func TestMemSnooze(t *testing.T) {
	clk := clock.NewFake(t0)
	snoozeBehaviour(t, NewMem(clk), clk.Now)
}

func TestStoreSnooze(t *testing.T) {
	t.Parallel()
	snoozeBehaviour(t, newStore(t), time.Now)
}

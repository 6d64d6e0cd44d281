package leasecron

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

func TestEarlyWindowCoversAFailover(t *testing.T) {
	short := trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second}
	for i, c := range []struct {
		m    schedule.MoverSettings
		l    trafficcop.Timing
		want time.Duration
	}{
		{schedule.MoverSettings{}, trafficcop.Timing{}, 75 * time.Second},
		{schedule.MoverSettings{}, short, 16 * time.Second},
		{schedule.MoverSettings{PollEvery: 30 * time.Second}, short, 30 * time.Second},
		{schedule.MoverSettings{Early: 3 * time.Second}, trafficcop.Timing{}, 3 * time.Second},
		{schedule.MoverSettings{Early: -1}, trafficcop.Timing{}, -1},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := earlyWindow(c.m, c.l); got != c.want {
				t.Errorf("earlyWindow(%+v, %+v) = %s, want %s", c.m, c.l, got, c.want)
			}
		})
	}
}

// When the mover takes back the confirmation of an early-sent one-off run
// because its row went before the move, a run whose id has no row left —
// a cancel removed it and could not mark the run — is recorded cancelled
// (issue 38, sweep seed 34188: the late confirmation left it queued for
// good, with no message that would start it); one whose id has a row
// again (rescheduled) only has its token taken back, as before.
func TestConfirmationOfARowACancelRemovedIsCancelled(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	w := &Worker{parts: c.parts}
	due := time.Now().Add(time.Minute).Truncate(time.Second)
	for _, id := range []string{"gone", "kept"} {
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "t", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
		if ok := c.runs.Confirm(ctx, []runs.Mark{{ID: id, Meta: runs.Meta{Type: "t", Due: due, Token: "tok1"}}}); !ok[0] {
			t.Fatalf("confirm %s refused", id)
		}
	}
	if _, err := c.sched.Cancel(ctx, "gone"); err != nil { // the row only: its run not marked
		t.Fatal(err)
	}
	if _, err := c.sched.Reschedule(ctx, "kept", due.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    string
		state runs.State
	}{{"gone", runs.Cancelled}, {"kept", runs.Queued}} {
		if err := w.unconfirmEarly(ctx, queue.Envelope{ID: tc.id, Type: "t", Due: due, Token: "tok1"}); err != nil {
			t.Fatal(err)
		}
		if r, err := c.runs.Get(ctx, tc.id); err != nil || r.State != tc.state || r.Token != "" {
			t.Errorf("%s: %s, token %q, %v; want %s, no token", tc.id, r.State, r.Token, err, tc.state)
		}
	}
}

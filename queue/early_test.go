package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Messages sent early (with a token): a run record that carries the token
// runs as usual; without it the task's row decides — current runs, stale is
// acknowledged without running (superseded), unreadable is put back.
func TestEarlySentMessagesAreCheckedAgainstTheirTask(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = rm
	var mu sync.Mutex
	asked := map[string]int{}
	current := map[string]bool{"standing": true, "stale": false}
	h.c.o.Current = func(_ context.Context, env Envelope) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[env.ID]++
		if env.ID == "unreadable" {
			return false, errors.New("table unreachable")
		}
		return current[env.ID], nil
	}
	var got calls
	h.c.Handle("t", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	ctx := context.Background()
	// confirmed: the mover recorded the token as it moved the row.
	if ok := rm.Confirm(ctx, []runs.Mark{{ID: "confirmed", Meta: runs.Meta{Type: "t", Due: t0, Token: "tok"}}}); !ok[0] {
		t.Fatal("not confirmed")
	}
	for _, id := range []string{"confirmed", "standing", "stale"} {
		h.enqueue(Envelope{ID: id, Type: "t", Due: t0, Token: "tok", Row: "00/x"})
	}
	h.start()
	counts := map[Outcome]int{}
	for range 3 {
		counts[h.next().outcome]++
	}
	if counts[OutcomeSucceeded] != 2 || counts[OutcomeSuperseded] != 1 {
		t.Fatalf("outcomes %v: want confirmed and standing run, stale superseded", counts)
	}
	if got.n() != 2 {
		t.Fatalf("handler ran %d times", got.n())
	}
	mu.Lock()
	if asked["confirmed"] != 0 || asked["standing"] != 1 || asked["stale"] != 1 {
		t.Fatalf("rows read: %v; a confirmed run must not read its row", asked)
	}
	mu.Unlock()
	if _, err := rm.Get(ctx, "stale"); !errors.Is(err, runs.ErrNotFound) {
		t.Fatalf("a superseded delivery wrote a run record: %v", err)
	}
	if st := h.c.Stats().ByType["t"]; st.Cancelled != 1 || st.Handled != 2 {
		t.Fatalf("stats %+v: a superseded delivery counts as cancelled", st)
	}
	// A row that cannot be read: tried three times within seconds, then
	// put back, not run, not dropped. The retries wait on the fake clock,
	// which moves whenever a retry is asleep.
	h.enqueue(Envelope{ID: "unreadable", Type: "t", Due: t0, Token: "tok", Row: "00/y"})
	stop := advancing(h.clk, time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := asked["unreadable"]
		return n > 0 && n < 3
	})
	o := h.next().outcome
	close(stop)
	if o != OutcomeDeferred {
		t.Fatalf("unreadable row: %s, want deferred", o)
	}
	mu.Lock()
	if asked["unreadable"] != 3 {
		t.Errorf("an unreadable row was read %d times before the message was put back, want 3", asked["unreadable"])
	}
	mu.Unlock()
	if got.n() != 2 || len(h.work.all()) != 1 {
		t.Fatalf("ran %d, %d messages left", got.n(), len(h.work.all()))
	}
}

// A cancel that removes an early-sent task's row just after the worker
// read it, and marks its run before the worker's claim, stops the task:
// the claim after the row check passes back the record it was refused
// over, which the cancel changed (issue 38, row 257, sweep seed 164747:
// the task ran after its cancel returned).
func TestACancelBetweenTheRowCheckAndTheClaimStopsTheTask(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = rm
	ctx := context.Background()
	due := t0.Add(-time.Minute)
	// An earlier scheduling of the id is in the queue: this one's
	// confirmation is refused, and its row decides.
	if ok := rm.ConfirmSent(ctx, []runs.Mark{{ID: "t10", Meta: runs.Meta{Type: "other", Due: due.Add(-time.Minute), Token: "first"}}}); !ok[0] {
		t.Fatal("the first scheduling's send was not recorded")
	}
	h.c.o.Current = func(ctx context.Context, env Envelope) (bool, error) {
		// The row stood as it was read; the cancel deletes it and marks
		// the run before the claim.
		if _, err := rm.CancelPending(ctx, env.ID, runs.Meta{Type: env.Type, Due: env.Due}); err != nil {
			return false, err
		}
		return true, nil
	}
	var got calls
	h.c.Handle("t", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "t10", Type: "t", Due: due, Token: "second", Row: "00/x"})
	h.start()
	if o := h.next().outcome; o != OutcomeCancelled {
		t.Fatalf("outcome %s; want cancelled", o)
	}
	if got.n() != 0 {
		t.Fatalf("the handler ran %d times after the cancel", got.n())
	}
}

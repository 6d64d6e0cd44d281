package queue

import (
	"context"
	"errors"
	"sync"
	"testing"

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
	// A row that cannot be read: put back, not run, not dropped.
	h.enqueue(Envelope{ID: "unreadable", Type: "t", Due: t0, Token: "tok", Row: "00/y"})
	if o := h.next().outcome; o != OutcomeDeferred {
		t.Fatalf("unreadable row: %s, want deferred", o)
	}
	if got.n() != 2 || len(h.work.all()) != 1 {
		t.Fatalf("ran %d, %d messages left", got.n(), len(h.work.all()))
	}
}

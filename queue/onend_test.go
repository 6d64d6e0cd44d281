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

// OnEnd hears of the end of runs others wait for or a batch counts, before
// their messages go; when it fails the message comes back, and the second
// delivery (a duplicate) tells it again before being acknowledged. Plain
// runs do not call it.
func TestOnEndBeforeTheMessageGoes(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1, BackoffBase: time.Second, VisibilityTimeout: 30 * time.Second, MaxAttempts: 1}})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = rm
	var mu sync.Mutex
	var heard []string
	fail := true
	h.c.o.OnEnd = func(ctx context.Context, env Envelope, st leasecrontype.RunState) error {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, env.ID+" "+string(st))
		if env.ID == "parent" && fail {
			fail = false
			return errors.New("table down")
		}
		return nil
	}
	h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { return nil })
	h.c.Handle("bad", func(context.Context, leasecrontype.Task) error { return errors.New("no") })
	h.enqueue(Envelope{ID: "plain", Type: "ok"})
	h.enqueue(Envelope{ID: "parent", Type: "ok", Waiters: true})
	h.enqueue(Envelope{ID: "member", Type: "bad", Batch: "b"})
	h.start()
	h.expect(OutcomeSucceeded, OutcomeSucceeded, OutcomeDead)
	if n, _ := h.work.Count(context.Background()); n != 1 {
		t.Fatalf("%d messages left, want the parent's (OnEnd failed)", n)
	}
	h.clk.Advance(31 * time.Second) // its visibility timeout
	h.expect(OutcomeDuplicate)
	mu.Lock()
	defer mu.Unlock()
	want := []string{"parent succeeded", "member dead", "parent succeeded"}
	if len(heard) != len(want) {
		t.Fatalf("OnEnd heard %v, want %v", heard, want)
	}
	for i := range want {
		if heard[i] != want[i] {
			t.Fatalf("OnEnd heard %v, want %v", heard, want)
		}
	}
	if n, _ := h.work.Count(context.Background()); n != 0 {
		t.Errorf("%d messages left after the duplicate", n)
	}
	if n, _ := h.poison.Count(context.Background()); n != 1 {
		t.Errorf("%d dead letters, want the member's", n)
	}
	mustRun(t, rm, "member", runs.Dead)
}

package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/rate"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// slowExtends is slowClaims whose first claim extension answers after the
// clock moved on by extendBy (retried through failing storage).
type slowExtends struct {
	*slowClaims
	extendBy time.Duration
	extended atomic.Int32
}

func (s *slowExtends) Extend(ctx context.Context, id, worker string, until time.Time) error {
	err := s.slowClaims.Extend(ctx, id, worker, until)
	if s.extended.Add(1) == 1 {
		s.clk.Advance(s.extendBy)
	}
	return err
}

// A delivery slowed to just short of two thirds of its visibility on its
// way to its handler (its claim), whose pause check before the handler
// takes it past them: its rate start is moved to then, and the check that
// it still holds its run comes after that move, extending its message and
// its claim. When that extension is slow too (three seconds here), the
// start the window counts must still be the handler's, within the half
// second a recorded start may precede it (README "Rate limits"); else a
// later take sees the start leave the window seconds before the handler's
// does, and more handlers than the rate allows begin within its window (a
// review of row 160's fix; the simulator's seed 90429, a rate exceeded,
// was read alongside but not tied to this).
func TestRateStartCountsAfterTheLastCheckBeforeTheHandler(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1, PauseCheck: 5 * time.Second,
		VisibilityTimeout: 30 * time.Second, MaxRunTime: time.Hour, PollMax: time.Hour}})
	lim := rate.New(table.NewMemory("", nil), h.clk.Now, time.Second)
	r := limiterRates{lim, rate.Rate{Count: 1, Per: 10 * time.Second}}
	h.c.o.Rates = r
	rs := &slowExtends{slowClaims: &slowClaims{Memory: runs.NewMemory(h.clk), clk: h.clk, by: 19800 * time.Millisecond}, extendBy: 3 * time.Second}
	rs.slow.Store(1)
	h.c.o.Runs = rs
	// The pause check before the handler (the second read: the first was
	// on arrival) takes a second: the delivery is then 20.8 s on, past two
	// thirds of its visibility.
	h.c.o.Pauses = &stallingPauses{on: 2, do: func() { h.clk.Advance(time.Second) }}
	var got calls
	h.c.Handle("r", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "r1", Type: "r", Due: h.clk.Now()})
	h.start()
	h.expect(OutcomeSucceeded)
	if got.n() != 1 {
		t.Fatalf("the handler ran %d times; want once", got.n())
	}
	if rs.extended.Load() == 0 {
		t.Fatalf("no claim extension before the handler: the test no longer reaches the late check")
	}
	got.mu.Lock()
	began := got.at[0]
	got.mu.Unlock()
	// The window must hold a start no more than half a second before the
	// handler's: a take now waits at least until began-0.5s leaves it.
	wait, _, err := lim.Take(context.Background(), "r", "", r.r)
	if err != nil {
		t.Fatal(err)
	}
	if least := began.Add(-rateFresh).Add(r.r.Per + time.Second).Sub(h.clk.Now()); wait < least {
		t.Fatalf("a take after the run waits %s; want at least %s: the window counts a start %s before the handler began (at %s)",
			wait, least, began.Add(r.r.Per+time.Second).Sub(h.clk.Now())-wait, began.Sub(t0))
	}
}

package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// pauseSource is a PauseSource in memory that counts its reads.
type pauseSource struct {
	mu    sync.Mutex
	types map[string]time.Time
	reads int
	err   error
	fails int // the next reads that fail, before err is looked at
}

func (p *pauseSource) PausedTypes(context.Context) (map[string]time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if p.fails > 0 {
		p.fails--
		return nil, errors.New("context deadline exceeded")
	}
	if p.err != nil {
		return nil, p.err
	}
	out := make(map[string]time.Time, len(p.types))
	for k, v := range p.types {
		out[k] = v
	}
	return out, nil
}

func (p *pauseSource) set(typ string, until time.Time, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if paused {
		p.types[typ] = until
	} else {
		delete(p.types, typ)
	}
}

func (p *pauseSource) readCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// A paused type's messages go back without running and without an
// attempt; other types flow; on resume the held messages come back at
// once (not after PauseHold) and run as first attempts. The pause state is
// read at most once per PauseCheck.
func TestPausedTypeWaitsAndResumes(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{"notify": {}}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	released := make(chan int, 10)
	h.c.hooks.released = func(n int) { released <- n }
	var got calls
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.c.Handle("report", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "n1", Type: "notify"})
	h.enqueue(Envelope{ID: "r1", Type: "report"})
	h.start()
	outcomes := map[string]Outcome{}
	for range 2 {
		ev := h.next()
		outcomes[ev.typ] = ev.outcome
	}
	if outcomes["notify"] != OutcomePaused || outcomes["report"] != OutcomeSucceeded {
		t.Fatalf("outcomes %v, want notify paused and report succeeded", outcomes)
	}
	m, env := h.only(h.work)
	if env.ID != "n1" || env.FailedAttempts != 0 || !m.NextVisible.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("paused message = %+v %+v; want n1 hidden for the default PauseHold, no attempt", m, env)
	}
	if got.n() != 1 || got.tasks[0].ID != "r1" {
		t.Fatalf("handler calls %+v, want only r1", got.tasks)
	}

	// Resumed: at its next check (PauseCheck after the start) the watcher
	// sees it and shows n1 again, long before the hold would have ended.
	src.set("notify", time.Time{}, false)
	h.clk.Advance(5 * time.Second)
	select {
	case n := <-released:
		if n != 1 {
			t.Fatalf("the watcher showed %d messages again, want 1", n)
		}
	case <-time.After(waitLimit):
		t.Fatal("the pause watcher never checked")
	}
	h.expect(OutcomeSucceeded)
	if got.n() != 2 || got.tasks[1].ID != "n1" || got.tasks[1].Attempt != 1 {
		t.Fatalf("handler calls %+v, want n1 as a first attempt", got.tasks)
	}
	if max := int(h.clk.Now().Sub(t0)/(5*time.Second)) + 2; src.readCount() > max {
		t.Fatalf("%d pause reads in %v, want at most %d (one per PauseCheck)", src.readCount(), h.clk.Now().Sub(t0), max)
	}
	if st := h.c.Stats().ByType["notify"]; st.Deferred != 1 || st.Failed != 0 || st.Handled != 1 {
		t.Fatalf("notify stats %+v, want one deferral, one success, no failure", st)
	}
}

// A pause with an end hides its messages until then; they run afterwards
// without a resume.
func TestPauseUntilEnds(t *testing.T) {
	until := t0.Add(30 * time.Second)
	src := &pauseSource{types: map[string]time.Time{"notify": until}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	var got calls
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "n1", Type: "notify"})
	h.start()
	h.expect(OutcomePaused)
	if m, _ := h.only(h.work); !m.NextVisible.Equal(until) {
		t.Fatalf("paused message visible at %v, want at the pause's end %v", m.NextVisible, until)
	}
	h.expect(OutcomeSucceeded)
	if got.n() != 1 || got.at[0].Before(until) {
		t.Fatalf("ran at %v, want after %v", got.at, until)
	}
}

// An idle consumer reads no pause state; a failed read keeps the last
// known state instead of pausing or resuming anything.
func TestPauseReadsOnlyWithWork(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	h.c.Handle("notify", func(context.Context, leasecrontype.Task) error { return nil })
	h.start()
	for range 30 { // a minute of idle polling
		h.clk.Advance(h.waitIdle())
	}
	if n := src.readCount(); n != 0 {
		t.Fatalf("an idle consumer read the pause state %d times", n)
	}
	src.mu.Lock()
	src.err = errors.New("storage unreachable")
	src.mu.Unlock()
	h.enqueue(Envelope{ID: "n1", Type: "notify"})
	h.clk.Advance(h.waitIdle())
	h.expect(OutcomeSucceeded)
	if n := src.readCount(); n != 2 {
		t.Fatalf("pause reads = %d, want 2 (the failed read tried once more: no state was ever read)", n)
	}
}

// A paused named queue holds every task routed to it, whatever its type,
// without an attempt; other queues flow; on resume its tasks run.
func TestPausedQueueWaitsAndResumes(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{QueuePauseKey("gpu"): {}}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	released := make(chan int, 10)
	h.c.hooks.released = func(n int) { released <- n }
	var got calls
	h.c.Handle("render", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "g1", Type: "render", Queue: "gpu"})
	h.enqueue(Envelope{ID: "d1", Type: "render"})
	h.start()
	var outcomes []Outcome
	for range 2 {
		outcomes = append(outcomes, h.next().outcome)
	}
	if got.n() != 1 || got.tasks[0].ID != "d1" || !slices.Contains(outcomes, OutcomePaused) {
		t.Fatalf("ran %+v with outcomes %v; want only d1 run and g1 paused", got.tasks, outcomes)
	}
	if _, env := h.only(h.work); env.ID != "g1" || env.FailedAttempts != 0 {
		t.Fatalf("held %+v; want g1 without an attempt", env)
	}
	src.set(QueuePauseKey("gpu"), time.Time{}, false)
	h.clk.Advance(5 * time.Second)
	if n := <-released; n != 1 {
		t.Fatalf("the watcher showed %d messages again, want 1", n)
	}
	h.await(OutcomeSucceeded)
	if got.n() != 2 || got.tasks[1].ID != "g1" || got.tasks[1].Attempt != 1 {
		t.Fatalf("ran %+v; want g1 after the resume, at attempt 1", got.tasks)
	}
}

// A message that arrived early gives its handler slot back while it waits
// and takes one again at its due time; when every slot is busy that can
// take long, and a pause begun meanwhile holds it: the pause is checked
// again once it has a slot (issue 38, the simulator's seed 2949: it
// started 16 s into a pause, 32 s after it arrived).
func TestPauseBegunWhileAnEarlyMessageWaitsForASlotHoldsIt(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1, PauseCheck: 5 * time.Second,
		PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	early := earlyHook(h)
	var got calls
	block := make(chan struct{})
	started := make(chan string, 2)
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.c.Handle("slow", func(_ context.Context, task leasecrontype.Task) error {
		started <- task.ID
		<-block
		return nil
	})
	h.enqueue(Envelope{ID: "n1", Type: "notify", Due: t0.Add(1500 * time.Millisecond)})
	h.start()
	recv(t, early, "hold of the early message")
	h.enqueue(Envelope{ID: "s1", Type: "slow"})
	// The poll finds s1 once the clock moves; it takes the only slot.
	for {
		h.clk.Advance(100 * time.Millisecond)
		select {
		case <-started:
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	// n1 comes due: its visibility is extended (its second update), and
	// it waits for the slot s1 holds; the type is paused meanwhile, and
	// the last read of the pause state grows old.
	for h.work.opCounts()["update"] < 2 {
		if h.clk.Now().Sub(t0) > time.Minute {
			t.Fatalf("the held message's visibility was never extended at its due time (%v)", h.work.opCounts())
		}
		h.clk.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	src.set("notify", time.Time{}, true)
	h.clk.Advance(6 * time.Second)
	close(block)
	outcomes := map[string]Outcome{}
	for range 2 {
		ev := h.next()
		outcomes[ev.typ] = ev.outcome
	}
	if outcomes["slow"] != OutcomeSucceeded || outcomes["notify"] != OutcomePaused {
		t.Fatalf("outcomes %v, want slow succeeded and notify paused", outcomes)
	}
	if got.n() != 0 {
		t.Fatalf("the paused type's handler ran: %+v", got.tasks)
	}
}

// A pause begun while a delivery waited for its rate budget (or a
// concurrency slot) to answer holds it too: the pause is checked again
// before the claim when the first check is more than half a second old,
// so the run is not claimed and the message goes back as any paused one.
func TestPauseBegunDuringASlowRateTakeHoldsIt(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = rm
	h.c.o.Rates = rateFunc(func(Envelope) time.Duration {
		src.set("notify", time.Time{}, true)
		h.clk.Advance(6 * time.Second)
		return 0
	})
	var got calls
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "n1", Type: "notify"})
	h.start()
	h.await(OutcomePaused)
	if got.n() != 0 {
		t.Fatalf("the paused type's handler ran: %+v", got.tasks)
	}
	if _, env := h.only(h.work); env.FailedAttempts != 0 {
		t.Fatalf("put back as %+v; want no attempt", env)
	}
	if r, err := rm.Get(context.Background(), "n1"); err == nil {
		t.Fatalf("the paused run was claimed: %+v", r)
	}
}

// rateFunc is a RateLimiter from a function of the envelope.
type rateFunc func(Envelope) time.Duration

func (f rateFunc) Take(_ context.Context, env Envelope) (time.Duration, error) { return f(env), nil }

// So does a pause begun while the run's claim was retried through failing
// storage: checked again after the claim, it gives the claim back — the
// run queued and not started, as before it (Unclaimer) — and the message
// goes back as any paused one, without an attempt; once resumed it runs
// as the first attempt.
func TestPauseBegunDuringASlowClaimGivesTheClaimBack(t *testing.T) {
	h, src, rs := pausedDuringClaim(t)
	var got calls
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	if ok := rs.MarkQueued(context.Background(), []runs.Mark{{ID: "n1", Meta: runs.Meta{Type: "notify", Due: h.clk.Now()}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	h.enqueue(Envelope{ID: "n1", Type: "notify", Due: h.clk.Now()})
	h.start()
	h.expect(OutcomePaused)
	if got.n() != 0 {
		t.Fatalf("the paused type's handler ran: %+v", got.tasks)
	}
	if _, env := h.only(h.work); env.FailedAttempts != 0 {
		t.Fatalf("put back as %+v; want no attempt", env)
	}
	if r := mustRun(t, rs.Memory, "n1", runs.Queued); r.Attempts != 0 || r.Worker != "" {
		t.Fatalf("the run after the claim was given back: %+v; want queued, not started", r)
	}
	src.set("notify", time.Time{}, false)
	h.expect(OutcomeSucceeded)
	if got.n() != 1 || got.tasks[0].Attempt != 1 {
		t.Fatalf("ran %+v; want once, as attempt 1", got.tasks)
	}
}

// A claim made after its row was checked (an early-sent message its run
// record did not confirm) is handed back as at shutdown when a pause
// holds it: the run queued with its attempt on the record, to be made
// again, so that its message, back after the mover moved the row (and
// found the run under way, so wrote nothing), is claimed by its token
// and not sent to the row that is gone (seed 1032's trap; a review of
// issue 38's row 82).
func TestPauseAfterARowCheckedClaimHandsBackAsAtShutdown(t *testing.T) {
	h, src, rs := pausedDuringClaim(t)
	rowGone := false
	var mu sync.Mutex
	h.c.o.Current = func(context.Context, Envelope) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return !rowGone, nil
	}
	var got calls
	h.c.Handle("notify", func(_ context.Context, task leasecrontype.Task) error { got.add(task, h.clk.Now()); return nil })
	h.enqueue(Envelope{ID: "n1", Type: "notify", Due: h.clk.Now(), Token: "tok", Row: "00/x"})
	h.start()
	h.expect(OutcomePaused)
	if r := mustRun(t, rs.Memory, "n1", runs.Queued); r.Attempts != 1 {
		t.Fatalf("the run after the hand-back: %+v; want queued with its attempt, as at shutdown", r)
	}
	// The mover moves the row meanwhile.
	mu.Lock()
	rowGone = true
	mu.Unlock()
	src.set("notify", time.Time{}, false)
	h.expect(OutcomeSucceeded)
	if got.n() != 1 || got.tasks[0].Attempt != 1 {
		t.Fatalf("ran %+v; want once, as attempt 1", got.tasks)
	}
}

// pausedDuringClaim is a harness whose first claim takes six seconds,
// during which type notify is paused.
func pausedDuringClaim(t *testing.T) (*harness, *pauseSource, *slowClaims) {
	src := &pauseSource{types: map[string]time.Time{}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second, PollMin: time.Second, PollMax: 2 * time.Second}, Pauses: src})
	rs := &slowClaims{Memory: runs.NewMemory(h.clk), clk: h.clk, by: 6 * time.Second}
	rs.during = &claimHook{time.Second, func() { src.set("notify", time.Time{}, true) }}
	rs.slow.Store(1)
	h.c.o.Runs = rs
	return h, src, rs
}

// A read that fails when the state kept is older than two checks — the
// worker stopped (frozen) with a read in hand past its timeout — is tried
// once more with a fresh timeout before the old state is trusted again: a
// pause begun meanwhile holds the type (issue 38, seed 77038). A failure
// while the state is fresh keeps it without a second read.
func TestAStalePauseStateIsReadAgainAfterAFailedRead(t *testing.T) {
	src := &pauseSource{types: map[string]time.Time{}}
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PauseCheck: 5 * time.Second}, Pauses: src})
	ctx := context.Background()
	if _, paused := h.c.pausedUntil(ctx, "report"); paused || src.readCount() != 1 {
		t.Fatalf("first read: paused %v after %d reads", paused, src.readCount())
	}
	h.clk.Advance(6 * time.Second)
	src.mu.Lock()
	src.fails = 1
	src.mu.Unlock()
	src.set("report", time.Time{}, true)
	if _, paused := h.c.pausedUntil(ctx, "report"); paused || src.readCount() != 2 {
		t.Fatalf("a failed read of a fresh state: paused %v after %d reads; want the state kept, no second read", paused, src.readCount())
	}
	h.clk.Advance(70 * time.Second) // frozen
	src.mu.Lock()
	src.fails = 1
	src.mu.Unlock()
	if _, paused := h.c.pausedUntil(ctx, "report"); !paused || src.readCount() != 4 {
		t.Fatalf("a failed read of a state 76 s old: paused %v after %d reads; want it read again and paused", paused, src.readCount())
	}
}

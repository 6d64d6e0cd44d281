package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// An initial delay is rounded down to whole seconds (never late); other
// visibility durations are rounded up.
func TestDelaySeconds(t *testing.T) {
	for i, c := range []struct {
		d        time.Duration
		down, up int32
	}{
		{-time.Second, 0, 0},
		{0, 0, 0},
		{999 * time.Millisecond, 0, 1},
		{time.Second, 1, 1},
		{1900 * time.Millisecond, 1, 2},
		{4*time.Second + time.Nanosecond, 4, 5},
		{8 * 24 * time.Hour, int32(MaxVisibility / time.Second), int32(MaxVisibility / time.Second)},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := secondsDown(c.d); got != c.down {
				t.Errorf("secondsDown(%v) = %d, want %d", c.d, got, c.down)
			}
			if got := seconds(c.d); got != c.up {
				t.Errorf("seconds(%v) = %d, want %d", c.d, got, c.up)
			}
		})
	}
}

// Against the service: a 1.9 s delay makes the message visible after 1 s,
// and a 0.9 s delay at once.
func TestAzureEnqueueDelayRoundsDown(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	q := e.client.work
	m, err := q.Enqueue(ctx, `{"v":1,"id":"a","type":"t"}`, 1900*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.NextVisible.Sub(m.Inserted); got != time.Second {
		t.Fatalf("visible %v after insertion, want 1s (delay rounded down)", got)
	}
	if _, err := q.Enqueue(ctx, `{"v":1,"id":"b","type":"t"}`, 900*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Peek(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Text != `{"v":1,"id":"b","type":"t"}` {
		t.Fatalf("visible at once: %+v, want only the 0.9 s message", msgs)
	}
}

// earlyHook records the consumer's holds until due.
func earlyHook(h *harness) chan time.Duration {
	ch := make(chan time.Duration, 10)
	h.c.hooks.early = func(_ string, d time.Duration) { ch <- d }
	return ch
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("no %s", what)
		var zero T
		return zero
	}
}

// A message visible before its envelope's Due is held until Due: the
// handler starts exactly on time, never early.
func TestEarlyEnvelopeHeldUntilDue(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	early := earlyHook(h)
	at := make(chan time.Time, 1)
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error { at <- h.clk.Now(); return nil })
	due := t0.Add(1500 * time.Millisecond)
	h.enqueue(Envelope{ID: "e", Type: "t", Due: due})
	h.start()
	if d := recv(t, early, "hold"); d != 1500*time.Millisecond {
		t.Fatalf("held for %v, want 1.5s", d)
	}
	for range 3 {
		select {
		case got := <-at:
			t.Fatalf("handler started at %v, before its due time %v", got, due)
		default:
		}
		h.clk.Advance(500 * time.Millisecond)
	}
	if got := recv(t, at, "handler start"); !got.Equal(due) {
		t.Fatalf("handler started at %v, want its due time %v", got, due)
	}
	h.await(OutcomeSucceeded)
}

// The cut of a held message's visibility records its delivery in the
// message (Dequeues), as every other hand-back does: should the hold be
// lost (the cut's answer lost, the message handed out again, the worker
// stopping), the next delivery does not count this one as a crash, and a
// task of one attempt is not set aside as "delivered 3 times" without
// having run (sweep seed 150965).
func TestAHeldMessageRecordsItsDelivery(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	early := earlyHook(h)
	running := make(chan int64, 1)
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error {
		// At the due time the text goes back as it came: a handler that
		// crashes its worker now is counted as before.
		msgs := h.work.all()
		env, err := DecodeEnvelope(msgs[0].Text)
		if err != nil {
			t.Error(err)
		}
		running <- env.Dequeues
		return nil
	})
	h.enqueue(Envelope{ID: "e", Type: "t", Due: t0.Add(1500 * time.Millisecond), MaxAttempts: 1})
	h.start()
	recv(t, early, "hold")
	msgs := h.work.all()
	if len(msgs) != 1 {
		t.Fatalf("%d messages held, want 1", len(msgs))
	}
	env, err := DecodeEnvelope(msgs[0].Text)
	if err != nil {
		t.Fatal(err)
	}
	if env.Dequeues != msgs[0].DequeueCount || env.Dequeues == 0 {
		t.Fatalf("held message records %d deliveries, its dequeue count is %d: want them equal", env.Dequeues, msgs[0].DequeueCount)
	}
	h.clk.Advance(1500 * time.Millisecond)
	if n := recv(t, running, "handler start"); n != 0 {
		t.Fatalf("while its handler runs the message records %d deliveries; want 0, as it came", n)
	}
	h.await(OutcomeSucceeded)
}

// While a consumer holds an early message its visibility ends at the due
// time (the next whole second), so a worker that dies holding it (a leader killed a moment before
// an occurrence) delays it by no more than that; at the due time the
// visibility is extended again before the task runs.
func TestHeldMessageReappearsAtItsDueTimeIfItsHolderDies(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	early := earlyHook(h)
	at := make(chan time.Time, 1)
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error { at <- h.clk.Now(); return nil })
	due := t0.Add(1500 * time.Millisecond)
	h.enqueue(Envelope{ID: "e", Type: "t", Due: due})
	h.start()
	recv(t, early, "hold")
	// The service counts visibility in whole seconds, rounded up: the
	// message would reappear within a second after its due time.
	if all := h.work.all(); len(all) != 1 || all[0].NextVisible.Before(due) || !all[0].NextVisible.Before(due.Add(time.Second)) {
		t.Fatalf("while held the message is next visible at %v, want within a second after its due time %v", all[0].NextVisible, due)
	}
	h.clk.Advance(1500 * time.Millisecond)
	if got := recv(t, at, "handler start"); !got.Equal(due) {
		t.Fatalf("handler started at %v, want %v", got, due)
	}
	h.await(OutcomeSucceeded)
	if n := h.work.opCounts()["update"]; n != 2 {
		t.Fatalf("%d message updates, want 2 (cut to the due time, extended at it)", n)
	}
}

// An envelope due further ahead than the hold limit (2 s, or half the
// visibility timeout) — the clocks of the host that sent it and of the
// consumer are apart, or another program sent it — is put back until its
// due time, unrun and without an attempt, and runs then: never early.
// (It used to run at once; the simulator found tasks starting 2 s early
// with the hosts' clocks a second apart.)
func TestEnvelopeDueFarAheadWaitsUntilDue(t *testing.T) {
	for _, c := range []struct {
		name  string
		vis   time.Duration
		ahead time.Duration
	}{
		{"beyond 2s", 0, 2500 * time.Millisecond},
		{"beyond half the visibility timeout", 2 * time.Second, 1500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{VisibilityTimeout: c.vis}})
			at := make(chan time.Time, 1)
			h.c.Handle("t", func(context.Context, leasecrontype.Task) error { at <- h.clk.Now(); return nil })
			due := t0.Add(c.ahead)
			h.enqueue(Envelope{ID: "far", Type: "t", Due: due})
			h.start()
			h.expect(OutcomeDeferred)
			if m, env := h.only(h.work); m.NextVisible.Before(due.Add(-time.Second)) || env.FailedAttempts != 0 {
				t.Fatalf("put back visible at %v with %d failed attempts; want hidden until about its due time %v, no attempt", m.NextVisible, env.FailedAttempts, due)
			}
			h.expect(OutcomeSucceeded)
			if got := recv(t, at, "handler start"); got.Before(due) {
				t.Fatalf("handler started at %v, before its due time %v", got, due)
			}
		})
	}
}

// A shutdown while a message is held puts it back at once, unrun and
// without counting an attempt.
func TestShutdownWhileHeldPutsTheMessageBack(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	early := earlyHook(h)
	ran := make(chan struct{}, 1)
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error { ran <- struct{}{}; return nil })
	h.enqueue(Envelope{ID: "held", Type: "t", Due: t0.Add(time.Second)})
	h.start()
	recv(t, early, "hold")
	h.running = false
	h.cancel()
	h.await(OutcomeDeferred)
	if err := recv(t, h.done, "Run return"); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 0 {
		t.Fatal("the handler ran")
	}
	m, env := h.only(h.work)
	if env.FailedAttempts != 0 || m.DequeueCount != 1 || env.Dequeues != 1 {
		t.Fatalf("put back with attempt %d, dequeue count %d, recorded dequeues %d", env.FailedAttempts, m.DequeueCount, env.Dequeues)
	}
	if !m.NextVisible.Equal(h.clk.Now()) {
		t.Fatalf("visible again at %v, want at once (%v)", m.NextVisible, h.clk.Now())
	}
}

// idleFor drains the consumer loop's sleeps until one of d.
func (h *harness) idleFor(d time.Duration) {
	h.t.Helper()
	deadline := time.After(waitLimit)
	var seen []time.Duration
	for {
		select {
		case got := <-h.idle:
			if got == d {
				return
			}
			seen = append(seen, got)
		case <-deadline:
			h.t.Fatalf("the loop never slept %v (slept %v)", d, seen)
		}
	}
}

// backedOff starts h's consumer and advances until it polls at PollMax.
func (h *harness) backedOff() {
	h.t.Helper()
	h.start()
	for {
		d := h.waitIdle()
		if d == h.c.o.PollMax {
			return
		}
		h.clk.Advance(d)
	}
}

// An idle consumer polling every PollMax dequeues a message on time when
// told when it becomes visible.
func TestWakeAtShortensAnIdleWait(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMin: 100 * time.Millisecond, PollMax: 30 * time.Second}, rand: func() float64 { return 0 }})
	at := make(chan time.Time, 1)
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error { at <- h.clk.Now(); return nil })
	h.backedOff()
	now := h.clk.Now()
	due := now.Add(3 * time.Second)
	text, _ := Envelope{V: EnvelopeVersion, ID: "w", Type: "t", Due: due}.Encode()
	if _, err := h.work.Enqueue(context.Background(), text, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	h.c.WakeAt(due)
	h.idleFor(3 * time.Second)
	h.clk.Advance(3 * time.Second)
	if got := recv(t, at, "handler start"); !got.Equal(due) {
		t.Fatalf("handler started at %v, want %v (not after the %v idle wait)", got, due, h.c.o.PollMax)
	}
	h.await(OutcomeSucceeded)
	if n := h.c.wakes.pending(); n != 0 {
		t.Fatalf("%d hints pending after they came due", n)
	}
}

// A hint that comes due snaps the polling backoff back to PollMin, so a
// message that appears a moment late is still found quickly; once that
// quick look finds nothing, the backoff resumes from half where it was.
func TestWakeAtResetsTheBackoff(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMin: 100 * time.Millisecond, PollMax: 10 * time.Second}, rand: func() float64 { return 0 }})
	h.backedOff()
	before := h.work.opCounts()["dequeue"]
	h.c.WakeAt(h.clk.Now().Add(time.Second))
	h.idleFor(time.Second)
	h.clk.Advance(time.Second)
	h.idleFor(100 * time.Millisecond)
	if n := h.work.opCounts()["dequeue"] - before; n != 1 {
		t.Fatalf("%d dequeues at the hint, want 1", n)
	}
	if st := h.c.Stats(); st.PollInterval != 5*time.Second {
		t.Fatalf("poll interval after a hinted empty poll = %v, want PollMax/2 (resuming the backoff)", st.PollInterval)
	}
}

// A hint at or before now makes the loop dequeue again without waiting.
func TestWakeAtNowDequeuesAtOnce(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMin: 100 * time.Millisecond, PollMax: 10 * time.Second}, rand: func() float64 { return 0 }})
	h.backedOff()
	before := h.work.opCounts()["dequeue"]
	h.c.WakeAt(h.clk.Now())
	h.idleFor(100 * time.Millisecond) // no clock advance needed
	if n := h.work.opCounts()["dequeue"] - before; n != 1 {
		t.Fatalf("%d dequeues after WakeAt(now), want 1", n)
	}
}

// Several hints are kept and served earliest first.
func TestWakeAtKeepsSeveralHints(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMin: 10 * time.Second, PollMax: 10 * time.Second}})
	h.backedOff()
	now := h.clk.Now()
	for _, s := range []time.Duration{5, 2, 8} {
		h.c.WakeAt(now.Add(s * time.Second))
	}
	h.idleFor(2 * time.Second)
	for i, step := range []time.Duration{2, 3, 3} {
		before := h.work.opCounts()["dequeue"]
		h.clk.Advance(step * time.Second)
		if i < 2 {
			h.idleFor(3 * time.Second) // until the next hint
		} else {
			h.idleFor(10 * time.Second) // no hints left: PollMax
		}
		if n := h.work.opCounts()["dequeue"] - before; n != 1 {
			t.Fatalf("hint %d: %d dequeues, want 1", i, n)
		}
	}
}

func TestWakeSet(t *testing.T) {
	w := newWakeSet()
	kicked := func() bool {
		select {
		case <-w.kick:
			return true
		default:
			return false
		}
	}
	w.add(t0.Add(1234 * time.Millisecond))
	if at, ok := w.next(); !ok || !at.Equal(t0.Add(1234*time.Millisecond)) {
		t.Fatalf("next = %v, %v; want the hint", at, ok)
	}
	if !kicked() {
		t.Fatal("a first hint must kick the loop")
	}
	w.add(t0.Add(1234 * time.Millisecond)) // the same instant again
	w.add(t0.Add(3 * time.Second))
	if w.pending() != 2 || kicked() {
		t.Fatalf("pending %d (want 2); a later hint must not kick", w.pending())
	}
	w.add(t0.Add(time.Second))
	if !kicked() {
		t.Fatal("an earlier hint must kick the loop")
	}
	w.take(t0.Add(1234 * time.Millisecond))
	if at, _ := w.next(); w.pending() != 1 || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("after take: %d pending, next %v", w.pending(), at)
	}
	// Full: the latest hints give way to earlier ones.
	w = newWakeSet()
	for i := range maxWakes + 10 {
		w.add(t0.Add(time.Duration(maxWakes+10-i) * time.Second))
	}
	if w.pending() != maxWakes {
		t.Fatalf("%d pending, want the cap %d", w.pending(), maxWakes)
	}
	w.take(t0.Add(maxWakes * time.Second))
	if w.pending() != 0 {
		t.Fatalf("the latest hints must be the ones dropped: %d left", w.pending())
	}
}

// A message held until its due time gives its concurrency slot back while
// it waits: with one slot, a message that is already due runs during the
// hold instead of queueing behind it.
func TestHeldMessageDoesNotBlockADueOne(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1}})
	early := earlyHook(h)
	ran := make(chan string, 2)
	h.c.Handle("t", func(_ context.Context, task leasecrontype.Task) error { ran <- task.ID; return nil })
	h.enqueue(Envelope{ID: "later", Type: "t", Due: t0.Add(1500 * time.Millisecond)})
	h.start()
	recv(t, early, "hold")
	h.enqueue(Envelope{ID: "now", Type: "t", Due: t0})
	h.c.WakeAt(t0) // dequeue again at once
	if id := recv(t, ran, "due message"); id != "now" {
		t.Fatalf("%s ran first; the due message should run during the other's hold", id)
	}
	h.await(OutcomeSucceeded)
	h.clk.Advance(1500 * time.Millisecond)
	if id := recv(t, ran, "held message"); id != "later" {
		t.Fatalf("then %s ran, want later", id)
	}
	h.await(OutcomeSucceeded)
}

// A lone message in an idle fleet: the poll that finds it returns fewer
// messages than it asked for, so the queue is drained; the consumer then
// waits half its idle interval instead of polling again at PollMin and
// climbing back through several empty polls.
func TestLoneMessageDoesNotSpeedUpPolling(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMin: 100 * time.Millisecond, PollMax: 10 * time.Second}, rand: func() float64 { return 0 }})
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error { return nil })
	h.backedOff()
	before := h.work.opCounts()["dequeue"]
	h.enqueue(Envelope{ID: "lone", Type: "t"})
	h.c.WakeAt(h.clk.Now())
	h.await(OutcomeSucceeded)
	h.idleFor(5 * time.Second)
	if n := h.work.opCounts()["dequeue"] - before; n != 1 {
		t.Fatalf("%d dequeues before the drained wait, want 1", n)
	}
	h.clk.Advance(5 * time.Second)
	h.idleFor(10 * time.Second) // and then back to PollMax
}

// A consumer whose handler failed wakes itself for the retry: the message
// runs again when its backoff ends, not at the next backed-off poll.
func TestRetryWakesItsConsumer(t *testing.T) {
	// rand 0: the retry backoff is jittered to half of 2 s.
	h := newHarness(t, ConsumerOptions{
		ConsumerSettings: ConsumerSettings{PollMin: 100 * time.Millisecond, PollMax: 30 * time.Second, BackoffBase: 2 * time.Second, BackoffMax: 2 * time.Second}, rand: func() float64 { return 0 }})
	var mu sync.Mutex
	var starts []time.Time
	h.c.Handle("t", func(context.Context, leasecrontype.Task) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, h.clk.Now())
		if len(starts) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	h.backedOff()
	h.enqueue(Envelope{ID: "r", Type: "t"})
	h.c.WakeAt(h.clk.Now())
	h.await(OutcomeRetried)
	h.idleFor(time.Second) // the retry's visibility delay, not PollMax/2
	h.quiesce()
	h.clk.Advance(time.Second)
	h.await(OutcomeSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if d := starts[1].Sub(starts[0]); d != time.Second {
		t.Fatalf("retry ran %v after the failure, want the 1s backoff", d)
	}
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// waitLimit bounds every wait on the consumer in real time, so a broken
// consumer fails a test instead of hanging it.
const waitLimit = 10 * time.Second

type event struct {
	typ     string
	outcome Outcome
}

type observer struct {
	events chan event
	polls  chan int
}

func (o *observer) OnHandled(typ string, out Outcome, _ time.Duration) { o.events <- event{typ, out} }
func (o *observer) OnPoll(n int, _ time.Duration) {
	select {
	case o.polls <- n:
	default:
	}
}

// harness runs a Consumer over MemQueues on a fake clock.
type harness struct {
	t        *testing.T
	clk      *clock.Fake
	work     *MemoryQueue
	poison   *MemoryQueue
	c        *Consumer
	obs      *observer
	idle     chan time.Duration
	extended chan error
	grace    chan struct{}
	started  chan string
	finished chan struct{}
	pending  time.Duration // an idle wait not yet advanced
	cancel   context.CancelFunc
	done     chan error
	running  bool
}

func newHarness(t *testing.T, o ConsumerOptions) *harness {
	t.Helper()
	clk := clock.NewFake(t0)
	h := &harness{
		t: t, clk: clk,
		work: NewMemoryQueue("work", clk), poison: NewMemoryQueue("poison", clk),
		obs:  &observer{events: make(chan event, 1000), polls: make(chan int, 1000)},
		idle: make(chan time.Duration, 1000), extended: make(chan error, 100),
		grace: make(chan struct{}, 10), started: make(chan string, 1000), finished: make(chan struct{}, 1000),
	}
	o.Clock = clk
	o.Observer = h.obs
	if o.InstanceID == "" {
		o.InstanceID = "test-worker"
	}
	if o.rand == nil {
		o.rand = func() float64 { return 1 } // retry.Jitter(d) == d
	}
	c, err := NewConsumerWith(h.work, h.poison, o)
	if err != nil {
		t.Fatal(err)
	}
	c.hooks = testHooks{
		idle:     func(d time.Duration) { h.idle <- d },
		extended: func(_ string, err error) { h.extended <- err },
		grace:    func() { h.grace <- struct{}{} },
		started:  func(id string) { h.started <- id },
		finished: func() { h.finished <- struct{}{} },
	}
	h.c = c
	t.Cleanup(h.stop)
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done, h.running = cancel, make(chan error, 1), true
	go func() { h.done <- h.c.Run(ctx) }()
}

// stop cancels Run, advancing the clock through the shutdown waits, and
// returns Run's result.
func (h *harness) stop() {
	if !h.running {
		return
	}
	h.running = false
	h.cancel()
	deadline := time.After(waitLimit)
	for {
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
			return
		case <-h.grace:
			// Teardown only: give handlers that are about to finish a
			// moment before cancelling the ones that wait for it.
			select {
			case err := <-h.done:
				if err != nil {
					h.t.Errorf("Run: %v", err)
				}
				return
			case <-time.After(100 * time.Millisecond):
				h.clk.Advance(h.c.o.ShutdownGrace)
			}
		case <-h.idle:
		case <-h.finished:
		case <-deadline:
			h.t.Fatal("Run did not return after cancel")
		}
	}
}

func (h *harness) enqueue(env Envelope) Message {
	h.t.Helper()
	if env.V == 0 {
		env.V = EnvelopeVersion
	}
	text, err := env.Encode()
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := h.work.Enqueue(context.Background(), text, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

// next returns the next outcome, advancing the fake clock by exactly the
// loop's sleep whenever the consumer is quiescent — the loop asleep and no
// message in flight — so retries with backoff come due without time
// running ahead of work in progress.
func (h *harness) next() event {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for {
		// An idle wait taken before the last outcome was returned (both
		// were ready; select took the wait, and the outcome, reported
		// before InFlight fell, was returned next) is advanced before
		// blocking: the consumer sleeps on it and says nothing more, so
		// waiting first would see no outcome (a loaded machine's
		// TestRequeueRefusedWhenTheIdIsPendingAgain).
		if h.pending > 0 && h.c.Stats().InFlight == 0 {
			// An outcome is reported before InFlight falls, so one may
			// be waiting although select took the idle wait: take it
			// first. Advancing past it could bring its message back and
			// settle it again before the test has seen the first
			// outcome (a second deferral where the test, told of the
			// first, changed what the next delivery finds).
			select {
			case ev := <-h.obs.events:
				return ev
			default:
			}
			d := h.pending
			h.pending = 0
			h.clk.Advance(d)
		}
		select {
		case ev := <-h.obs.events:
			return ev
		case d := <-h.idle:
			h.pending = d
		case <-h.finished:
		case <-deadline:
			h.t.Fatal("no outcome")
		}
	}
}

// expect takes outcomes until one of type want arrives, failing on others.
func (h *harness) expect(want ...Outcome) {
	h.t.Helper()
	for _, w := range want {
		if ev := h.next(); ev.outcome != w {
			h.t.Fatalf("outcome = %s (type %s), want %s", ev.outcome, ev.typ, w)
		}
	}
}

// await takes the next outcome without moving the clock.
func (h *harness) await(want Outcome) {
	h.t.Helper()
	select {
	case ev := <-h.obs.events:
		if ev.outcome != want {
			h.t.Fatalf("outcome = %s (type %s), want %s", ev.outcome, ev.typ, want)
		}
	case <-time.After(waitLimit):
		h.t.Fatal("no outcome")
	}
}

// quiesce waits until no message is in flight: an outcome is reported
// before its delivery lets go of the task's id, and a copy delivered in
// between is put back as already running here.
func (h *harness) quiesce() {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for h.c.Stats().InFlight > 0 {
		select {
		case <-h.finished:
		case <-deadline:
			h.t.Fatalf("%d message(s) still in flight", h.c.Stats().InFlight)
		}
	}
}

func (h *harness) waitGrace() {
	h.t.Helper()
	select {
	case <-h.grace:
	case <-time.After(waitLimit):
		h.t.Fatal("no shutdown wait began")
	}
}

// waitIdle waits for the loop to go to sleep and returns its wait.
func (h *harness) waitIdle() time.Duration {
	h.t.Helper()
	if d := h.pending; d > 0 {
		h.pending = 0
		return d
	}
	select {
	case d := <-h.idle:
		return d
	case <-time.After(waitLimit):
		h.t.Fatal("consumer loop never idled")
		return 0
	}
}

func (h *harness) waitStarted() string {
	h.t.Helper()
	select {
	case id := <-h.started:
		return id
	case <-time.After(waitLimit):
		h.t.Fatal("handler never started")
		return ""
	}
}

func (h *harness) waitExtended() error {
	h.t.Helper()
	select {
	case err := <-h.extended:
		return err
	case <-time.After(waitLimit):
		h.t.Fatal("visibility never extended")
		return nil
	}
}

func (h *harness) only(q *MemoryQueue) (Message, Envelope) {
	h.t.Helper()
	all := q.all()
	if len(all) != 1 {
		h.t.Fatalf("queue %s holds %d messages, want 1", q.Name(), len(all))
	}
	env, _ := DecodeEnvelope(all[0].Text)
	return all[0], env
}

func (h *harness) deadLetters() []DeadLetter {
	var out []DeadLetter
	for _, m := range h.poison.all() {
		out = append(out, parseRecord(m))
	}
	return out
}

// calls counts handler invocations.
type calls struct {
	mu    sync.Mutex
	tasks []leasecrontype.Task
	at    []time.Time
}

func (c *calls) add(t leasecrontype.Task, now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tasks = append(c.tasks, t)
	c.at = append(c.at, now)
	return len(c.tasks)
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tasks)
}

// flakyQueue wraps a MemoryQueue and fails Update on demand.
type flakyQueue struct {
	*MemoryQueue
	mu        sync.Mutex
	updateErr error
	deleted   []Message
}

// Delete records each message deleted (with the delivery's receipt and
// dequeue count) before deleting it.
func (f *flakyQueue) Delete(ctx context.Context, m Message) error {
	f.mu.Lock()
	f.deleted = append(f.deleted, m)
	f.mu.Unlock()
	return f.MemoryQueue.Delete(ctx, m)
}

// deletes returns the messages Delete was called with, in order.
func (f *flakyQueue) deletes() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

func (f *flakyQueue) Update(ctx context.Context, m Message, text string, vis time.Duration) (Message, error) {
	f.mu.Lock()
	err := f.updateErr
	f.mu.Unlock()
	if err != nil {
		return m, err
	}
	return f.MemoryQueue.Update(ctx, m, text, vis)
}

func (f *flakyQueue) failUpdates(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updateErr = err
}

// limiter is a scripted Limiter.
type limiter struct {
	mu       sync.Mutex
	refuse   int // refuse this many acquisitions first
	asked    int
	released int
}

func (l *limiter) Acquire(_ context.Context, _ string) (func(), bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	if l.refuse > 0 {
		l.refuse--
		return nil, false, nil
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.released++
	}, true, nil
}

// payloads is an in-memory PayloadFetcher.
type payloads struct {
	mu          sync.Mutex
	blobs       map[string][]byte
	deleted     []string
	unreachable map[string]int // reads of a blob that fail as a dropped connection does
}

func (p *payloads) Get(_ context.Context, ref string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.unreachable[ref]; ok && n > 0 {
		p.unreachable[ref] = n - 1
		return nil, fmt.Errorf("payload get %s: %w", ref, errors.New("connection reset by peer"))
	}
	b, ok := p.blobs[ref]
	if !ok {
		return nil, fmt.Errorf("%w: %s", payload.ErrNotFound, ref)
	}
	return b, nil
}

func (p *payloads) Delete(_ context.Context, ref string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.blobs, ref)
	p.deleted = append(p.deleted, ref)
	return nil
}

func mustRun(t *testing.T, m *runs.Memory, id string, want runs.State) runs.Run {
	t.Helper()
	r, err := m.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	if r.State != want {
		t.Fatalf("run %s state = %s, want %s (%+v)", id, r.State, want, r)
	}
	return r
}

// slotLimiter is a scripted SlotLimiter: its slots are held until lost.
type slotLimiter struct {
	mu       sync.Mutex
	lostAt   int // the acquisition (1-based) whose slot is lost at once
	asked    int
	released int
	slots    []*testSlot
}

func (l *slotLimiter) Acquire(context.Context, string) (func(), bool, error) {
	panic("a SlotLimiter is asked through AcquireSlot")
}

func (l *slotLimiter) AcquireSlot(context.Context, string) (Slot, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &testSlot{l: l, ctx: ctx, cancel: cancel}
	if l.asked == l.lostAt {
		s.lose()
	}
	l.slots = append(l.slots, s)
	return s, true, nil
}

// last returns the slot given last.
func (l *slotLimiter) last() *testSlot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slots[len(l.slots)-1]
}

type testSlot struct {
	l      *slotLimiter
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (s *testSlot) lose()                    { s.cancel(errors.New("lease lost")) }
func (s *testSlot) Held() bool               { return s.ctx.Err() == nil }
func (s *testSlot) Context() context.Context { return s.ctx }
func (s *testSlot) Release(context.Context) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.l.released++
	s.cancel(errors.New("released"))
	return nil
}

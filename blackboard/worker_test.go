package blackboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

var t0 = time.Date(2009, 7, 14, 12, 12, 5, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

// recorder is a handler registry that records every invocation.
type recorder struct {
	mu    sync.Mutex
	tasks []leasecrontype.Task
	fn    func(ctx context.Context, t leasecrontype.Task) error
}

func (r *recorder) handlers(typ string) (leasecrontype.Handler, bool) {
	if typ != "count" {
		return nil, false
	}
	return func(ctx context.Context, t leasecrontype.Task) error {
		r.mu.Lock()
		r.tasks = append(r.tasks, t)
		fn := r.fn
		r.mu.Unlock()
		if fn != nil {
			return fn(ctx, t)
		}
		return nil
	}, true
}

func (r *recorder) setFn(fn func(ctx context.Context, t leasecrontype.Task) error) {
	r.mu.Lock()
	r.fn = fn
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tasks)
}

func newWorker(t *testing.T, s Store, clk clock.Clock, r *recorder, mod func(*Options)) *Worker {
	t.Helper()
	o := Options{Settings: Settings{Cycle: time.Minute}, Clock: clk, Logger: quiet, Handlers: r.handlers}
	if mod != nil {
		mod(&o)
	}
	w, err := NewWorkerWithStore(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func addKey(t *testing.T, s Store, key string, interval time.Duration) {
	t.Helper()
	if err := NewBoardWithStore(s).Add(context.Background(), Entry{Key: key, Interval: interval, Type: "count", Payload: "p-" + key}, nil); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s Store, key string) Entry {
	t.Helper()
	e, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func runOnce(t *testing.T, w *Worker) CycleReport {
	t.Helper()
	rep, err := w.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestClaimsOnlyWhenDue(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	w := newWorker(t, s, clk, r, func(o *Options) { o.InstanceID = "w1" })
	addKey(t, s, "westlafcals", time.Minute)

	if rep := runOnce(t, w); rep.Claimed != 1 || rep.Keys != 1 {
		t.Fatalf("first cycle: %+v, want one claim", rep)
	}
	task := r.tasks[0]
	if task.Key != "westlafcals" || task.ID != "westlafcals@2009-07-14T12:12:05Z" || task.Type != "count" ||
		string(task.Payload) != "p-westlafcals" || task.Attempt != 1 || !task.Due.Equal(t0) {
		t.Fatalf("task = %+v", task)
	}
	e := get(t, s, "westlafcals")
	if e.Running || !e.Start.Equal(t0) || !e.Stop.Equal(t0) || e.Runs != 1 || e.Worker != "w1" || e.LastError != "" || !e.LockedUntil.IsZero() {
		t.Fatalf("row after run: %+v", e)
	}

	clk.Advance(59 * time.Second)
	if rep := runOnce(t, w); rep.Claimed != 0 || r.count() != 1 {
		t.Fatalf("before the interval: %+v, %d runs", rep, r.count())
	}
	if st := get(t, s, "westlafcals").State(clk.Now()); st != StateWaiting {
		t.Fatalf("state %s, want waiting", st)
	}
	clk.Advance(time.Second)
	if rep := runOnce(t, w); rep.Claimed != 1 || r.count() != 2 {
		t.Fatalf("at the interval: %+v, %d runs", rep, r.count())
	}
	if e := get(t, s, "westlafcals"); e.Runs != 2 || !e.Start.Equal(t0.Add(time.Minute)) {
		t.Fatalf("row after second run: %+v", e)
	}
}

// barrierStore makes every List wait until n lists are in progress, so
// that racing workers all see the same snapshot.
type barrierStore struct {
	Store
	mu      sync.Mutex
	n       int
	waiting int
	release chan struct{}
}

func (b *barrierStore) List(ctx context.Context) ([]Entry, error) {
	rows, err := b.Store.List(ctx)
	b.mu.Lock()
	if b.release == nil {
		b.release = make(chan struct{})
	}
	ch := b.release
	b.waiting++
	if b.waiting == b.n {
		close(ch)
		b.waiting, b.release = 0, nil
	}
	b.mu.Unlock()
	<-ch
	return rows, err
}

func TestRacingWorkersClaimEachKeyOnce(t *testing.T) {
	mem := NewMemoryStore()
	s := &barrierStore{Store: mem, n: 3}
	clk := clock.NewFake(t0)
	r := &recorder{}
	var workers []*Worker
	for i := range 3 {
		workers = append(workers, newWorker(t, s, clk, r, func(o *Options) { o.InstanceID = fmt.Sprintf("w%d", i) }))
	}
	const keys = 8
	for i := range keys {
		addKey(t, mem, fmt.Sprintf("city%02d", i), time.Minute)
	}
	for round := 1; round <= 5; round++ {
		reps := make([]CycleReport, len(workers))
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Go(func() { reps[i] = runOnce(t, w) })
		}
		wg.Wait()
		claimed, conflicts := 0, 0
		for _, rep := range reps {
			claimed += rep.Claimed
			conflicts += rep.Conflicts
		}
		if claimed != keys || r.count() != keys*round {
			t.Fatalf("round %d: %d claims, %d runs in all; want %d per round (reports %+v)", round, claimed, r.count(), keys, reps)
		}
		t.Logf("round %d: %d claims, %d conflicts", round, claimed, conflicts)
		clk.Advance(time.Minute)
	}
	perKey := map[string]int{}
	for _, task := range r.tasks {
		perKey[task.Key]++
	}
	for k, n := range perKey {
		if n != 5 {
			t.Errorf("key %s ran %d times in 5 intervals", k, n)
		}
	}
}

func TestTwoWorkersRaceForOneKey(t *testing.T) {
	mem := NewMemoryStore()
	s := &barrierStore{Store: mem, n: 2}
	clk := clock.NewFake(t0)
	r := &recorder{}
	a := newWorker(t, s, clk, r, func(o *Options) { o.InstanceID = "a" })
	b := newWorker(t, s, clk, r, func(o *Options) { o.InstanceID = "b" })
	addKey(t, mem, "localist", time.Hour)
	var ra, rb CycleReport
	var wg sync.WaitGroup
	wg.Go(func() { ra = runOnce(t, a) })
	wg.Go(func() { rb = runOnce(t, b) })
	wg.Wait()
	if r.count() != 1 || ra.Claimed+rb.Claimed != 1 || ra.Conflicts+rb.Conflicts != 1 {
		t.Fatalf("runs %d; a %+v; b %+v: want exactly one claim and one conflict", r.count(), ra, rb)
	}
}

func TestAbandonedClaimIsTakenOverAfterTTL(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	var runs []RunReport
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.InstanceID = "survivor"
		o.LockTTL = 10 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs = append(runs, rr) }
	})
	// A worker crashed mid-run: its claim stays until LockedUntil.
	if _, err := s.Insert(context.Background(), Entry{Key: "aroundfred", Interval: time.Minute, Type: "count",
		Start: t0, ClaimedAt: t0, Running: true, Worker: "crashed", ClaimID: "c1", LockedUntil: t0.Add(10 * time.Second), Runs: 1}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if rep := runOnce(t, w); rep.Claimed != 0 {
		t.Fatalf("claimed a live claim: %+v", rep)
	}
	if st := get(t, s, "aroundfred").State(clk.Now()); st != StateRunning {
		t.Fatalf("state %s, want running", st)
	}
	clk.Advance(5*time.Second + time.Millisecond)
	if st := get(t, s, "aroundfred").State(clk.Now()); st != StateAbandoned {
		t.Fatalf("state %s, want abandoned", st)
	}
	rep := runOnce(t, w)
	if rep.Claimed != 1 || rep.TakenOver != 1 || len(runs) != 1 || !runs[0].TakenOver || runs[0].TakenFrom != "crashed" || !runs[0].Recorded {
		t.Fatalf("takeover: cycle %+v runs %+v", rep, runs)
	}
	e := get(t, s, "aroundfred")
	if e.Running || e.Worker != "survivor" || e.Runs != 2 || e.ClaimID == "c1" {
		t.Fatalf("row after takeover: %+v", e)
	}
}

func TestHandWrittenClaimExpiresAfterInterval(t *testing.T) {
	e := Entry{Key: "k", Interval: time.Minute, Running: true, ClaimedAt: t0}
	if e.Abandoned(t0.Add(time.Minute)) || !e.Abandoned(t0.Add(time.Minute+1)) {
		t.Fatal("a claim without LockedUntil should expire one interval after ClaimedAt")
	}
	if (Entry{Interval: time.Minute, Running: true, Start: t0}).Abandoned(t0.Add(30*time.Second)) != false {
		t.Fatal("fresh claim abandoned")
	}
}

// blockingRecorder starts handlers that signal and wait.
func blocking(r *recorder) (started chan leasecrontype.Task, release chan error) {
	started = make(chan leasecrontype.Task, 10)
	release = make(chan error)
	r.setFn(func(ctx context.Context, t leasecrontype.Task) error {
		started <- t
		select {
		case err := <-release:
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	return started, release
}

func intrude(t *testing.T, s Store, key, worker string, now time.Time) {
	t.Helper()
	e := get(t, s, key)
	e.Worker, e.ClaimID, e.Start, e.ClaimedAt, e.LockedUntil, e.Running = worker, "intruder-claim", now, now, now.Add(time.Hour), true
	if _, err := s.Replace(context.Background(), e, e.ETag); err != nil {
		t.Fatal(err)
	}
}

func TestStaleOwnerCannotOverwriteNewOwner(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, release := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) { o.Hooks.OnRun = func(rr RunReport) { runs <- rr } })
	addKey(t, s, "networksierra", time.Minute)
	done := make(chan CycleReport)
	go func() { done <- runOnce(t, w) }()
	<-started
	intrude(t, s, "networksierra", "other", t0)
	release <- nil // the stale owner finishes and tries to record
	<-done
	rr := <-runs
	if rr.Recorded || !errors.Is(rr.RecordErr, ErrClaimLost) {
		t.Fatalf("stale owner's report %+v: want not recorded with ErrClaimLost", rr)
	}
	e := get(t, s, "networksierra")
	if !e.Running || e.Worker != "other" || e.ClaimID != "intruder-claim" || !e.Stop.IsZero() {
		t.Fatalf("new owner's row was overwritten: %+v", e)
	}
}

func TestRunNowDuringRunIsKeptAndRecordSucceeds(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, release := blocking(r)
	w := newWorker(t, s, clk, r, nil)
	addKey(t, s, "localist", time.Hour)
	done := make(chan CycleReport)
	go func() { done <- runOnce(t, w) }()
	<-started
	if err := NewBoardWithStore(s).RunNow(context.Background(), "localist"); err != nil {
		t.Fatal(err)
	}
	release <- nil
	<-done
	e := get(t, s, "localist")
	if e.Running || !e.RunNow || e.Stop.IsZero() {
		t.Fatalf("row %+v: want stopped with RunNow still set", e)
	}
	r.setFn(nil)
	if rep := runOnce(t, w); rep.Claimed != 1 {
		t.Fatalf("RunNow ignored: %+v", rep)
	}
	if e := get(t, s, "localist"); e.RunNow || e.Runs != 2 {
		t.Fatalf("row %+v: want RunNow cleared by the claim", e)
	}
}

func TestRunNowRunsBeforeInterval(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	w := newWorker(t, s, clk, r, nil)
	addKey(t, s, "aroundfred", 8*time.Hour)
	runOnce(t, w)
	clk.Advance(time.Minute)
	if rep := runOnce(t, w); rep.Claimed != 0 {
		t.Fatalf("ran before its interval: %+v", rep)
	}
	b := NewBoardWithStore(s)
	if err := b.RunNow(context.Background(), "aroundfred"); err != nil {
		t.Fatal(err)
	}
	if st := get(t, s, "aroundfred").State(clk.Now()); st != StateDue {
		t.Fatalf("state %s, want due", st)
	}
	if rep := runOnce(t, w); rep.Claimed != 1 || r.count() != 2 {
		t.Fatalf("RunNow not honoured: %+v", rep)
	}
	if rep := runOnce(t, w); rep.Claimed != 0 {
		t.Fatalf("RunNow not cleared: %+v", rep)
	}
	if err := b.RunNow(context.Background(), "nosuchkey"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RunNow(unknown) = %v, want ErrNotFound", err)
	}
}

// advanceUntil advances clk by step whenever a timer is pending, until done
// is closed.
func advanceUntil(t *testing.T, clk *clock.Fake, step time.Duration, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out advancing the fake clock")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := clk.WaitForTimers(ctx, 1)
		cancel()
		if err == nil {
			clk.Advance(step)
		}
	}
}

func TestHeartbeatExtendsClaimAndDetectsTakeover(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, _ := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.LockTTL = 30 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	addKey(t, s, "westlafcals", time.Hour)
	done := make(chan struct{})
	go func() { runOnce(t, w); close(done) }()
	<-started
	ctx := context.Background()
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // heartbeat: a third of the TTL
	// (The extension's own timer, bounding it by the lock's margin, is
	// pending while it is written: wait for the write itself.)
	poll(t, "one heartbeat", func() bool {
		e := get(t, s, "westlafcals")
		return e.LockedUntil.Equal(t0.Add(40*time.Second)) && e.Running
	})
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	intrude(t, s, "westlafcals", "other", clk.Now())
	clk.Advance(10 * time.Second)
	<-done
	rr := <-runs
	if !errors.Is(rr.Err, ErrClaimLost) || !errors.Is(rr.RecordErr, ErrClaimLost) || rr.Recorded {
		t.Fatalf("report %+v: the handler should have been cancelled with ErrClaimLost", rr)
	}
	if e := get(t, s, "westlafcals"); e.Worker != "other" {
		t.Fatalf("new owner overwritten: %+v", e)
	}
}

// flakyStore fails writes while down is set.
type flakyStore struct {
	Store
	mu   sync.Mutex
	down bool
}

var errUnreachable = errors.New("storage unreachable")

func (f *flakyStore) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }
func (f *flakyStore) isDown() bool   { f.mu.Lock(); defer f.mu.Unlock(); return f.down }
func (f *flakyStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if f.isDown() {
		return "", errUnreachable
	}
	return f.Store.Replace(ctx, e, ifMatch)
}
func (f *flakyStore) List(ctx context.Context) ([]Entry, error) {
	if f.isDown() {
		return nil, errUnreachable
	}
	return f.Store.List(ctx)
}

func TestHandlerCancelledWhenClaimCannotBeExtended(t *testing.T) {
	mem := NewMemoryStore()
	s := &flakyStore{Store: mem}
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, _ := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.LockTTL = 30 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	addKey(t, mem, "localist", time.Hour)
	done := make(chan struct{})
	go func() { _, _ = w.RunOnce(context.Background()); close(done) }()
	<-started
	s.setDown(true)
	advanceUntil(t, clk, time.Second, done)
	rr := <-runs
	if !errors.Is(rr.Err, ErrLockExpired) || rr.Recorded || !errors.Is(rr.RecordErr, errUnreachable) {
		t.Fatalf("report %+v: want the handler cancelled with ErrLockExpired and nothing recorded", rr)
	}
	// The handler must stop before the lock expires for others.
	if stop := rr.Start.Add(rr.Duration); !stop.Before(t0.Add(30 * time.Second)) {
		t.Fatalf("handler ran until %v, past its lock (%v)", stop, t0.Add(30*time.Second))
	}
	// Storage comes back: the key is abandoned, and taken over.
	s.setDown(false)
	r.setFn(nil)
	clk.Advance(time.Minute)
	if rep := runOnce(t, w); rep.TakenOver != 1 {
		t.Fatalf("abandoned claim not taken over: %+v", rep)
	}
}

func TestPanicsAndErrorsAreRecorded(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	fail := map[string]string{"a": "panic", "b": "error"}
	r.fn = func(_ context.Context, t leasecrontype.Task) error {
		switch fail[t.Key] {
		case "panic":
			panic("boom in " + t.Key)
		case "error":
			return errors.New("feed unreachable")
		}
		return nil
	}
	w := newWorker(t, s, clk, r, nil)
	for _, k := range []string{"a", "b", "c"} {
		addKey(t, s, k, time.Minute)
	}
	if rep := runOnce(t, w); rep.Claimed != 3 {
		t.Fatalf("a panic stopped the walk: %+v", rep)
	}
	if e := get(t, s, "a"); e.Running || !strings.Contains(e.LastError, "handler panicked: boom in a") || e.Failures != 1 || strings.Contains(e.LastError, "goroutine") {
		t.Fatalf("panic row %+v", e)
	}
	if e := get(t, s, "b"); e.LastError != "feed unreachable" || e.Failures != 1 {
		t.Fatalf("error row %+v", e)
	}
	if e := get(t, s, "c"); e.LastError != "" || e.Failures != 0 {
		t.Fatalf("ok row %+v", e)
	}
	// A later success clears LastError but keeps the failure count.
	delete(fail, "b")
	clk.Advance(time.Minute)
	runOnce(t, w)
	if e := get(t, s, "b"); e.LastError != "" || e.Failures != 1 || e.Runs != 2 {
		t.Fatalf("row after recovery %+v", e)
	}
}

func TestShutdownRecordsInterruptedRunWithRunNow(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, _ := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) { o.Hooks.OnRun = func(rr RunReport) { runs <- rr } })
	addKey(t, s, "westlafcals", time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after shutdown, want nil", err)
	}
	rr := <-runs
	if !rr.Interrupted || !rr.Recorded || !errors.Is(rr.Err, ErrShutdown) {
		t.Fatalf("report %+v", rr)
	}
	if e := get(t, s, "westlafcals"); e.Running || !e.RunNow || !strings.Contains(e.LastError, "interrupted") {
		t.Fatalf("row %+v: want released with RunNow so another worker reruns it", e)
	}
}

func TestUnknownTypeIsLeftAlone(t *testing.T) {
	s := NewMemoryStore()
	r := &recorder{}
	w := newWorker(t, s, clock.NewFake(t0), r, nil)
	if err := NewBoardWithStore(s).Add(context.Background(), Entry{Key: "x", Interval: time.Minute, Type: "nosuchtype"}, nil); err != nil {
		t.Fatal(err)
	}
	if rep := runOnce(t, w); rep.Claimed != 0 || rep.Due != 0 {
		t.Fatalf("claimed a key it cannot run: %+v", rep)
	}
	if e := get(t, s, "x"); e.Runs != 0 || e.Running {
		t.Fatalf("row touched: %+v", e)
	}
}

func TestRunLoopCyclesWithJitter(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	cycles := make(chan CycleReport, 10)
	runs := make(chan RunReport, 10)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.Cycle = time.Minute
		o.Hooks.OnCycle = func(c CycleReport) { cycles <- c }
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	addKey(t, s, "k", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	if c := <-cycles; c.Claimed != 1 {
		t.Fatalf("first cycle %+v", c)
	}
	for i := 0; i < 5; i++ {
		<-runs // the run has been recorded: only the cycle timer is left
		if err := clk.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(53 * time.Second) // less than 90% of the cycle
		select {
		case c := <-cycles:
			t.Fatalf("cycle %d came early: %+v", i, c)
		default:
		}
		if clk.Pending() != 1 {
			t.Fatalf("pending timers %d", clk.Pending())
		}
		clk.Advance(13 * time.Second) // 66 s: more than 110% of it
		if c := <-cycles; c.Claimed != 1 {
			t.Fatalf("cycle %d: %+v, want the key (interval = cycle) claimed; row %+v", i, c, get(t, s, "k"))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestListFailureDoesNotStopTheLoop(t *testing.T) {
	mem := NewMemoryStore()
	s := &flakyStore{Store: mem}
	clk := clock.NewFake(t0)
	r := &recorder{}
	cycles := make(chan CycleReport, 10)
	w := newWorker(t, s, clk, r, func(o *Options) { o.Hooks.OnCycle = func(c CycleReport) { cycles <- c } })
	addKey(t, mem, "k", time.Minute)
	s.setDown(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	if c := <-cycles; !errors.Is(c.Err, errUnreachable) {
		t.Fatalf("cycle %+v, want the list error", c)
	}
	s.setDown(false)
	if err := clk.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if c := <-cycles; c.Err != nil || c.Claimed != 1 {
		t.Fatalf("cycle after recovery %+v", c)
	}
	cancel()
	<-done
}

func TestMaxConcurrentRunsKeysInParallel(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	started, release := blocking(r)
	w := newWorker(t, s, clk, r, func(o *Options) { o.MaxConcurrent = 3 })
	for i := range 5 {
		addKey(t, s, fmt.Sprintf("k%d", i), time.Hour)
	}
	done := make(chan CycleReport)
	go func() { done <- runOnce(t, w) }()
	for range 3 {
		<-started
	}
	select {
	case <-started:
		t.Fatal("a fourth key started with MaxConcurrent 3")
	case <-time.After(50 * time.Millisecond):
	}
	for range 5 {
		release <- nil
	}
	if rep := <-done; rep.Claimed != 5 {
		t.Fatalf("%+v", rep)
	}
}

func TestOptionsValidation(t *testing.T) {
	h := (&recorder{}).handlers
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "Handlers"},
		{Options{Settings: Settings{Cycle: time.Millisecond}, Handlers: h}, "Cycle = 1ms"},
		{Options{Settings: Settings{LockTTL: time.Millisecond}, Handlers: h}, "LockTTL = 1ms"},
		{Options{Settings: Settings{LockTTL: -time.Second}, Handlers: h}, "LockTTL = -1s"},
		{Options{Settings: Settings{Heartbeat: -time.Second}, Handlers: h}, "Heartbeat = -1s"},
		{Options{Settings: Settings{MaxConcurrent: 65}, Handlers: h}, "MaxConcurrent = 65"},
		{Options{Handlers: h, Table: "bad-name"}, "bad-name"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := NewWorkerWithStore(NewMemoryStore(), tc.o)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("options %+v: error %v, want ErrInvalid naming %q", tc.o, err, tc.want)
			}
		})
	}
	w, err := NewWorkerWithStore(NewMemoryStore(), Options{Handlers: h})
	if err != nil {
		t.Fatal(err)
	}
	if w.opts.Cycle != DefaultCycle || w.opts.MaxConcurrent != 1 || w.opts.Table != DefaultTable || w.ID() == "" || w.opts.LockTTL != 0 {
		t.Fatalf("defaults %+v", w.opts)
	}
	if w.heartbeat(time.Minute) != 20*time.Second {
		t.Fatalf("default heartbeat %v", w.heartbeat(time.Minute))
	}
	if _, err := NewWorker(nil, Options{Handlers: h}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewWorker(nil) = %v", err)
	}
}

func TestBoard(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	testBoard(t, ctx, NewBoardWithStore(s), s)
}

// testBoard exercises the Board over s (memory or table).
func testBoard(t *testing.T, ctx context.Context, b *Board, s Store) {
	for _, bad := range []Entry{
		{Key: "a/b", Interval: time.Minute, Type: "count"},
		{Key: "", Interval: time.Minute, Type: "count"},
		{Key: "k", Interval: 500 * time.Millisecond, Type: "count"},
		{Key: "k", Interval: time.Minute},
		{Key: "k", Interval: time.Minute, Type: "two words"},
		{Key: "k", Interval: time.Minute, Type: "count", Payload: strings.Repeat("x", MaxPayload+1)},
	} {
		if err := b.Add(ctx, bad, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Add(%.60v) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := b.Add(ctx, Entry{Key: "westlafcals", Interval: 8 * time.Hour, Type: "calendar", Payload: `{"feeds":["http://a"]}`, Runs: 99}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(ctx, Entry{Key: "aroundfred", Interval: time.Hour, Type: "calendar"}, nil); err != nil {
		t.Fatal(err)
	}
	err := b.Add(ctx, Entry{Key: "westlafcals", Interval: time.Hour, Type: "calendar"}, nil)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "westlafcals") {
		t.Fatalf("duplicate Add = %v, want ErrExists naming the key", err)
	}
	e, err := b.Get(ctx, "westlafcals")
	if err != nil {
		t.Fatal(err)
	}
	if e.Runs != 0 || e.Interval != 8*time.Hour || e.Payload != `{"feeds":["http://a"]}` || e.State(t0) != StateDue {
		t.Fatalf("added row %+v", e)
	}
	// Give it some state, then replace its definition: the state stays.
	e.Start, e.Stop, e.Runs, e.Worker = t0, t0.Add(time.Minute), 3, "w1"
	if _, err := s.Replace(ctx, e, e.ETag); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(ctx, Entry{Key: "westlafcals", Interval: time.Hour, Type: "calendar2", Payload: "x"}, &AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	e, _ = b.Get(ctx, "westlafcals")
	if e.Interval != time.Hour || e.Type != "calendar2" || e.Payload != "x" || e.Runs != 3 || !e.Start.Equal(t0) || e.Worker != "w1" {
		t.Fatalf("replaced row %+v", e)
	}
	if err := b.Add(ctx, Entry{Key: "localist", Interval: time.Hour, Type: "calendar"}, &AddOptions{Replace: true}); err != nil {
		t.Fatalf("Add with Replace of a new key: %v", err)
	}
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range list {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, ",") != "aroundfred,localist,westlafcals" {
		t.Fatalf("List keys %v", keys)
	}
	if err := b.Remove(ctx, "aroundfred"); err != nil {
		t.Fatal(err)
	}
	err = b.Remove(ctx, "aroundfred")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"aroundfred" is not on the blackboard`) {
		t.Fatalf("Remove(unknown) = %v", err)
	}
	if _, err := b.Get(ctx, "aroundfred"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(removed) = %v", err)
	}
	if err := b.RunNow(ctx, "aroundfred"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RunNow(removed) = %v", err)
	}
	if err := b.RunNow(ctx, "localist"); err != nil {
		t.Fatal(err)
	}
	if e, _ := b.Get(ctx, "localist"); !e.RunNow {
		t.Fatal("RunNow not set")
	}
}

func TestMemStore(t *testing.T) { testStore(t, context.Background(), NewMemoryStore()) }

// testStore checks the Store contract; it runs on MemStore and on Azurite.
func testStore(t *testing.T, ctx context.Context, s Store) {
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	full := Entry{Key: "k1", Interval: 90 * time.Minute, Type: "calendar", Payload: "ünïcode payload\nline 2",
		Start: t0.Add(123456700), Stop: t0.Add(2 * time.Second), Running: true, Worker: "w", ClaimID: "c", ClaimedAt: t0,
		LockedUntil: t0.Add(time.Hour), LastError: "boom", LastDuration: 1500 * time.Millisecond, RunNow: true, Runs: 1 << 40, Failures: 2}
	etag, err := s.Insert(ctx, full)
	if err != nil || etag == "" {
		t.Fatalf("Insert = %q, %v", etag, err)
	}
	if _, err := s.Insert(ctx, full); !errors.Is(err, ErrExists) {
		t.Fatalf("second Insert = %v, want ErrExists", err)
	}
	got, err := s.Get(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ETag != etag {
		t.Fatalf("Get ETag %q, Insert gave %q", got.ETag, etag)
	}
	got.ETag = ""
	if got != full {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, full)
	}
	// Zero times and empty strings round-trip as zero.
	if _, err := s.Insert(ctx, Entry{Key: "k0", Interval: time.Second, Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if z, err := s.Get(ctx, "k0"); err != nil || !z.Start.IsZero() || !z.LockedUntil.IsZero() || z.Worker != "" || z.Runs != 0 {
		t.Fatalf("zero row %+v, %v", z, err)
	}
	// Conditional replace: the current ETag wins, a stale one is refused.
	next := full
	next.Running = false
	etag2, err := s.Replace(ctx, next, etag)
	if err != nil || etag2 == etag {
		t.Fatalf("Replace = %q, %v", etag2, err)
	}
	if _, err := s.Replace(ctx, next, etag); !errors.Is(err, ErrConflict) {
		t.Fatalf("Replace with stale ETag = %v, want ErrConflict", err)
	}
	if _, err := s.Replace(ctx, next, etag2); err != nil {
		t.Fatalf("Replace with the ETag Replace returned: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Key != "k0" || list[1].Key != "k1" || list[1].ETag == "" || list[1].Running {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, err := s.Replace(ctx, Entry{Key: "nope", Interval: time.Second}, etag); !errors.Is(err, leasecrontype.ErrNotFound) && !errors.Is(err, ErrConflict) {
		t.Fatalf("Replace(missing) = %v", err)
	}
	if err := s.Delete(ctx, "k1", etag); !errors.Is(err, ErrConflict) {
		t.Fatalf("Delete with stale ETag = %v", err)
	}
	if err := s.Delete(ctx, "k1", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k1", ""); !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("Delete(missing) = %v", err)
	}
	if _, err := s.Get(ctx, "k1"); !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("Get(missing) = %v", err)
	}
}

func TestEntryStateAndTaskID(t *testing.T) {
	e := Entry{Key: "k", Interval: time.Hour}
	if e.State(t0) != StateDue || !e.NextDue().IsZero() {
		t.Fatal("never-run key should be due")
	}
	e.Start = t0
	if e.State(t0.Add(time.Minute)) != StateWaiting || !e.NextDue().Equal(t0.Add(time.Hour)) {
		t.Fatal("waiting")
	}
	if e.State(t0.Add(time.Hour)) != StateDue {
		t.Fatal("due at interval")
	}
	if id := taskID("k", t0.In(time.FixedZone("x", 3600))); id != "k@2009-07-14T12:12:05Z" {
		t.Fatalf("TaskID %s", id)
	}
	if long := trunc.Head(strings.Repeat("é", 5000), maxErrorLen); len(long) > maxErrorLen || !strings.HasSuffix(long, "…") {
		t.Fatalf("truncateError gave %d bytes", len(long))
	}
}

// A row written by hand that fails validation (no interval) is skipped, not
// run on every cycle, and the valid keys beside it still run.
func TestInvalidRowIsSkipped(t *testing.T) {
	s := NewMemoryStore()
	clk := clock.NewFake(t0)
	r := &recorder{}
	w := newWorker(t, s, clk, r, func(o *Options) { o.InstanceID = "w1" })
	addKey(t, s, "good", time.Minute)
	if _, err := s.Insert(context.Background(), Entry{Key: "nointerval", Type: "count"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		runOnce(t, w)
		clk.Advance(time.Minute)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, task := range r.tasks {
		if task.Key != "good" {
			t.Fatalf("ran the invalid row: %+v", task)
		}
	}
	if len(r.tasks) != 3 {
		t.Fatalf("good ran %d times over three intervals, want 3", len(r.tasks))
	}
}

// lostStore commits the writes lost picks and then reports them failed,
// as a response lost on its way back does: with the error the SDK's
// retry of the write meets (the row changed: ErrConflict), or a plain
// one when it gave up.
type lostStore struct {
	Store
	mu   sync.Mutex
	lost func(e Entry) error // nil: answered as done
}

func (l *lostStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	etag, err := l.Store.Replace(ctx, e, ifMatch)
	return l.answer(e, etag, err)
}

func (l *lostStore) Insert(ctx context.Context, e Entry) (string, error) {
	etag, err := l.Store.Insert(ctx, e)
	return l.answer(e, etag, err)
}

// answer is what the caller of a write of e hears: lost's error for a
// write it picks that was done.
func (l *lostStore) answer(e Entry, etag string, err error) (string, error) {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if err == nil && lost != nil {
		if lerr := lost(e); lerr != nil {
			return "", lerr
		}
	}
	return etag, err
}

func (l *lostStore) set(f func(e Entry) error) { l.mu.Lock(); l.lost = f; l.mu.Unlock() }

// once returns a lost func that loses the first write matching pick with
// err.
func once(pick func(Entry) bool, err error) func(Entry) error {
	var mu sync.Mutex
	done := false
	return func(e Entry) error {
		mu.Lock()
		defer mu.Unlock()
		if done || !pick(e) {
			return nil
		}
		done = true
		return err
	}
}

// A claim whose answer was lost still stands: the worker that made it
// runs the key, instead of leaving it claimed by nobody until its lock
// expires (sim: the blackboard's liveness).
func TestClaimWhoseAnswerWasLostRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"retried into a conflict", fmt.Errorf("update: %w", ErrConflict)},
		{"given up", errUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemoryStore()
			s := &lostStore{Store: mem}
			clk := clock.NewFake(t0)
			r := &recorder{}
			w := newWorker(t, s, clk, r, nil)
			addKey(t, mem, "k", time.Hour)
			s.set(once(func(e Entry) bool { return e.Running }, tc.err))
			rep := runOnce(t, w)
			if r.count() != 1 || rep.Claimed != 1 {
				t.Fatalf("ran %d times (report %+v): want the lost claim run once", r.count(), rep)
			}
			if e := get(t, mem, "k"); e.Running || e.Runs != 1 || e.Stop.IsZero() {
				t.Fatalf("row after the run: %+v: want it recorded, one run", e)
			}
		})
	}
}

// A run's end whose answer was lost, met again by the retry as a
// conflict, is recorded: the worker does not report its claim lost.
func TestEndWhoseAnswerWasLostIsRecorded(t *testing.T) {
	mem := NewMemoryStore()
	s := &lostStore{Store: mem}
	clk := clock.NewFake(t0)
	r := &recorder{}
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) { o.Hooks.OnRun = func(rr RunReport) { runs <- rr } })
	addKey(t, mem, "k", time.Hour)
	r.setFn(func(context.Context, leasecrontype.Task) error { return errors.New("boom") })
	s.set(once(func(e Entry) bool { return !e.Running && !e.Stop.IsZero() }, fmt.Errorf("update: %w", ErrConflict)))
	runOnce(t, w)
	rr := <-runs
	if !rr.Recorded || rr.RecordErr != nil {
		t.Fatalf("report %+v: want the end recorded", rr)
	}
	if e := get(t, mem, "k"); e.Running || e.Failures != 1 || e.LastError == "" {
		t.Fatalf("row %+v: want one failure recorded once", e)
	}
}

// An add whose answer was lost, its retry meeting the key it wrote, is
// done: the same definition is on the board.
func TestAddWhoseAnswerWasLostSucceeds(t *testing.T) {
	mem := NewMemoryStore()
	s := &lostStore{Store: mem}
	b := NewBoardWithStore(s)
	s.set(once(func(Entry) bool { return true }, fmt.Errorf("insert: %w", ErrExists)))
	e := Entry{Key: "k", Interval: time.Hour, Type: "count", Payload: "p"}
	if err := b.Add(context.Background(), e, nil); err != nil {
		t.Fatalf("add: %v", err)
	}
	// Another definition under the key is still refused.
	e.Interval = time.Minute
	if err := b.Add(context.Background(), e, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("add of another definition: %v, want ErrExists", err)
	}
	// When the read that tells whose the key is fails, the add cannot
	// say it exists: it may be its own (issue 38, the simulator's seed
	// 12992: a new key's add answered "already exists" for the key it
	// had written).
	fg := &failGets{Store: s, fail: true}
	b = NewBoardWithStore(fg)
	s.set(once(func(Entry) bool { return true }, fmt.Errorf("insert: %w", ErrExists)))
	e = Entry{Key: "k2", Interval: time.Hour, Type: "count", Payload: "p"}
	err := b.Add(context.Background(), e, nil)
	if err == nil || errors.Is(err, ErrExists) || !errors.Is(err, errUnreachable) {
		t.Fatalf("add whose answer was lost and whose key could not be read: %v, want the read's error, not ErrExists", err)
	}
	fg.fail = false
	if err := b.Add(context.Background(), e, nil); err != nil {
		t.Fatalf("the add tried again: %v", err)
	}
}

// failGets fails every Get while fail is set (from the start).
type failGets struct {
	Store
	fail bool
}

func (f *failGets) Get(ctx context.Context, key string) (Entry, error) {
	if f.fail {
		return Entry{}, errUnreachable
	}
	return f.Store.Get(ctx, key)
}

// hookStore calls before on every Replace before it goes out: it may
// advance a fake clock (a slow request) or block.
type hookStore struct {
	Store
	before func(ctx context.Context, e Entry) error
}

func (h *hookStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if h.before != nil {
		if err := h.before(ctx, e); err != nil {
			return "", err
		}
	}
	return h.Store.Replace(ctx, e, ifMatch)
}

// poll waits (in real time) until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A claim answered late is extended at once: the heartbeats count from
// the claim, not from the handler's start, so the lock does not run out
// under a handler that began late (sim: the blackboard's one-at-a-time).
func TestFirstHeartbeatCountsFromTheClaim(t *testing.T) {
	mem := NewMemoryStore()
	clk := clock.NewFake(t0)
	claims := 0
	s := &hookStore{Store: mem, before: func(_ context.Context, e Entry) error {
		if e.Running && e.LockedUntil.Equal(e.Start.Add(30*time.Second)) && e.Start.Equal(t0) {
			claims++
			if claims == 1 {
				clk.Advance(15 * time.Second) // the claim's answer takes 15 s
			}
		}
		return nil
	}}
	r := &recorder{}
	started, release := blocking(r)
	w := newWorker(t, s, clk, r, func(o *Options) { o.LockTTL = 30 * time.Second })
	addKey(t, mem, "k", time.Hour)
	done := make(chan struct{})
	go func() { runOnce(t, w); close(done) }()
	<-started
	// Due 10 s after the claim, 5 s before the handler began: at once.
	poll(t, "the first heartbeat", func() bool { return get(t, mem, "k").LockedUntil.Equal(t0.Add(45 * time.Second)) })
	release <- nil
	<-done
}

// A heartbeat that does not answer before the lock's margin is given up
// there, and the handler is cancelled in time: a slow extension must not
// keep it running past the lock another worker may take over.
func TestSlowHeartbeatStillCancelsTheHandlerInTime(t *testing.T) {
	mem := NewMemoryStore()
	clk := clock.NewFake(t0)
	s := &hookStore{Store: mem, before: func(ctx context.Context, e Entry) error {
		if e.Running && e.LockedUntil.After(e.Start.Add(30*time.Second)) {
			<-ctx.Done() // the extension hangs until given up
			return ctx.Err()
		}
		return nil
	}}
	r := &recorder{}
	var mu sync.Mutex
	var stopped time.Time
	r.setFn(func(ctx context.Context, _ leasecrontype.Task) error {
		<-ctx.Done()
		mu.Lock()
		stopped = clk.Now()
		mu.Unlock()
		return context.Cause(ctx)
	})
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, clk, r, func(o *Options) {
		o.LockTTL = 30 * time.Second
		o.Hooks.OnRun = func(rr RunReport) { runs <- rr }
	})
	addKey(t, mem, "k", time.Hour)
	done := make(chan struct{})
	go func() { _, _ = w.RunOnce(context.Background()); close(done) }()
	advanceUntil(t, clk, time.Second, done)
	rr := <-runs
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(rr.Err, ErrLockExpired) || stopped.After(t0.Add(27*time.Second)) {
		t.Fatalf("handler stopped at %v with %v: want ErrLockExpired by %v (the lock less its margin)", stopped, rr.Err, t0.Add(27*time.Second))
	}
}

// A claim answered after its lock's margin has passed is not run: the
// key is left to run again at the next cycle.
func TestClaimAnsweredTooLateDoesNotRun(t *testing.T) {
	mem := NewMemoryStore()
	clk := clock.NewFake(t0)
	s := &hookStore{Store: mem, before: func(_ context.Context, e Entry) error {
		if e.Running && e.Start.Equal(t0) && e.LockedUntil.Equal(t0.Add(30*time.Second)) && clk.Now().Equal(t0) {
			clk.Advance(28 * time.Second)
		}
		return nil
	}}
	r := &recorder{}
	w := newWorker(t, s, clk, r, func(o *Options) { o.LockTTL = 30 * time.Second })
	addKey(t, mem, "k", time.Hour)
	runOnce(t, w)
	if r.count() != 0 {
		t.Fatalf("the handler ran %d times under a claim answered 28 s into its 30 s lock", r.count())
	}
	if e := get(t, mem, "k"); e.Running || !e.RunNow {
		t.Fatalf("row %+v: want the claim given up with RunNow set", e)
	}
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// azEnv is one test's slice of the shared Azurite: its own queues and table.
type azEnv struct {
	t      *testing.T
	sc     *storage.Clients
	queue  string
	poison string
	runs   *runs.Store
	client *Client
}

func newAz(t *testing.T) *azEnv {
	t.Helper()
	srv := azuritetest.Shared(t)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	e := &azEnv{t: t, sc: sc, queue: azuritetest.Name(t, "w"), poison: azuritetest.Name(t, "p")}
	if e.runs, err = runs.New(sc, runs.Options{Table: azuritetest.Name(t, "r")}); err != nil {
		t.Fatal(err)
	}
	if e.client, err = NewClient(sc.Queue, ClientOptions{Queue: e.queue, PoisonQueue: e.poison}); err != nil {
		t.Fatal(err)
	}
	return e
}

// fast returns consumer options with short timings for tests.
func (e *azEnv) fast(o ConsumerOptions) ConsumerOptions {
	o.Queue, o.PoisonQueue = e.queue, e.poison
	if o.BackoffBase == 0 {
		o.BackoffBase = time.Second
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 2 * time.Second
	}
	if o.PollMin == 0 {
		o.PollMin = 50 * time.Millisecond
	}
	if o.PollMax == 0 {
		o.PollMax = 300 * time.Millisecond
	}
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = 5 * time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	return o
}

// azConsumer is a running consumer with its outcomes.
type azConsumer struct {
	c      *Consumer
	obs    *observer
	cancel context.CancelFunc
	done   chan error
}

func (e *azEnv) start(o ConsumerOptions, handlers map[string]leasecrontype.Handler) *azConsumer {
	e.t.Helper()
	obs := &observer{events: make(chan event, 1000), polls: make(chan int, 1)}
	o.Observer = obs
	c, err := NewConsumer(e.sc.Queue, e.fast(o))
	if err != nil {
		e.t.Fatal(err)
	}
	for typ, h := range handlers {
		c.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ac := &azConsumer{c: c, obs: obs, cancel: cancel, done: make(chan error, 1)}
	go func() { ac.done <- c.Run(ctx) }()
	e.t.Cleanup(ac.stop)
	return ac
}

func (ac *azConsumer) stop() {
	if ac.cancel == nil {
		return
	}
	ac.cancel()
	ac.cancel = nil
	if err := <-ac.done; err != nil {
		panic(fmt.Sprintf("consumer Run: %v", err))
	}
}

// outcomes collects outcomes from consumers until stop says enough or
// limit passes.
func outcomes(t *testing.T, limit time.Duration, stop func(map[Outcome]int) bool, cs ...*azConsumer) map[Outcome]int {
	t.Helper()
	got := map[Outcome]int{}
	merged := make(chan event, 1000)
	quit := make(chan struct{})
	defer close(quit)
	for _, c := range cs {
		go func(c *azConsumer) {
			for {
				select {
				case ev := <-c.obs.events:
					select {
					case merged <- ev:
					case <-quit:
						return
					}
				case <-quit:
					return
				}
			}
		}(c)
	}
	deadline := time.After(limit)
	for !stop(got) {
		select {
		case ev := <-merged:
			got[ev.outcome]++
		case <-deadline:
			t.Fatalf("outcomes after %v: %v", limit, got)
		}
	}
	return got
}

func atLeast(o Outcome, n int) func(map[Outcome]int) bool {
	return func(m map[Outcome]int) bool { return m[o] >= n }
}

func TestAzureQueueReceipts(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	q := e.client.work
	if err := e.client.Enqueue(ctx, Envelope{ID: "r1", Type: "t"}, 0); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Dequeue(ctx, 32, 30*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].DequeueCount != 1 {
		t.Fatalf("Dequeue = %+v, %v", msgs, err)
	}
	m1 := msgs[0]
	m2, err := q.Update(ctx, m1, m1.Text, 30*time.Second)
	if err != nil || m2.PopReceipt == m1.PopReceipt || m2.PopReceipt == "" {
		t.Fatalf("Update = %+v, %v", m2, err)
	}
	if _, err := q.Update(ctx, m1, m1.Text, 30*time.Second); !errors.Is(err, ErrMessageGone) || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Update with a stale receipt = %v, want ErrMessageGone", err)
	}
	if err := q.Delete(ctx, m1); !errors.Is(err, ErrMessageGone) {
		t.Fatalf("Delete with a stale receipt = %v, want ErrMessageGone", err)
	}
	if err := q.Delete(ctx, m2); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, m2); !errors.Is(err, ErrMessageGone) {
		t.Fatalf("Delete of a deleted message = %v, want ErrMessageGone", err)
	}
}

// Messages are sent with a time-to-live of -1: they never expire. A
// delayed message is invisible: Depth counts it, Peek and Visible do not.
func TestAzureTTLNeverExpires(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	if err := e.client.Enqueue(ctx, Envelope{ID: "forever", Type: "t"}, 0); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.client.work.Peek(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Peek = %+v, %v", msgs, err)
	}
	if exp := msgs[0].Expires; exp.Before(time.Now().AddDate(1000, 0, 0)) {
		t.Fatalf("message expires %v; want never (TTL -1)", exp)
	}
	// A delayed message is invisible until its delay passes.
	if err := e.client.Enqueue(ctx, Envelope{ID: "later", Type: "t"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if msgs, _ := e.client.work.Peek(ctx, 32); len(msgs) != 1 {
		t.Fatalf("a delayed message is visible: %d visible", len(msgs))
	}
	if n, err := e.client.Depth(ctx); err != nil || n != 2 {
		t.Fatalf("Depth = %d, %v; want 2", n, err)
	}
	// Visible counts only visible messages: with the one visible taken
	// by a consumer, the two Depth counts are none.
	if n, exact, err := e.client.Visible(ctx, 5); err != nil || n != 1 || !exact {
		t.Fatalf("Visible(5) = %d, %v, %v with one message visible; want 1, exact", n, exact, err)
	}
	if n, exact, err := e.client.Visible(ctx, 1); err != nil || n != 1 || exact {
		t.Fatalf("Visible(1) = %d, %v, %v with one message visible; want 1, not exact (it stops at 1)", n, exact, err)
	}
	if got, err := e.client.work.Dequeue(ctx, 32, time.Hour); err != nil || len(got) != 1 {
		t.Fatalf("Dequeue = %d messages, %v; want the one visible", len(got), err)
	}
	if n, exact, err := e.client.Visible(ctx, 5); err != nil || n != 0 || !exact {
		t.Fatalf("Visible = %d, %v, %v with none visible (one delayed, one taken); want 0, exact", n, exact, err)
	}
}

func TestAzureEnqueueSizeLimit(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	env := Envelope{V: 1, ID: "big", Type: "t", Enqueued: time.Now().UTC()}
	base, _ := env.Encode()
	env.Payload = strings.Repeat("x", MaxMessageSize-len(base)-len(`,"payload":""`))
	if text, _ := env.Encode(); len(text) != MaxMessageSize {
		t.Fatalf("test setup: %d bytes", len(text))
	}
	if err := e.client.Enqueue(ctx, env, 0); err != nil {
		t.Fatalf("a message of exactly %d bytes: %v", MaxMessageSize, err)
	}
	env.Payload += "x"
	if err := e.client.Enqueue(ctx, env, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over = %v, want ErrTooLarge", err)
	}
	if err := e.client.Enqueue(ctx, Envelope{ID: "", Type: "t"}, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("no id = %v, want ErrMalformed", err)
	}
	// JSON that XML must escape round-trips unchanged.
	tricky := Envelope{ID: "tricky", Type: "t", Payload: `<a href="x">&amp;'</a>` + "\u00e9\t\n"}
	if err := e.client.Enqueue(ctx, tricky, 0); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.client.work.Dequeue(ctx, 32, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range msgs {
		if env, err := DecodeEnvelope(m.Text); err == nil && env.ID == "tricky" {
			found = env.Payload == tricky.Payload
		}
	}
	if !found {
		t.Fatal("payload with XML metacharacters did not round-trip")
	}
}

// A handler that always fails reaches the poison queue after exactly
// MaxAttempts, with its reason; Requeue brings it back.
func TestAzureAlwaysFailingGoesToPoisonAndRequeues(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	var calls atomic.Int32
	c := e.start(ConsumerOptions{ConsumerSettings: ConsumerSettings{MaxAttempts: 3}, Runs: e.runs}, map[string]leasecrontype.Handler{
		"doomed": func(context.Context, leasecrontype.Task) error {
			n := calls.Add(1)
			return fmt.Errorf("doomed attempt %d", n)
		},
	})
	if m := e.runs.MarkQueued(ctx, []runs.Mark{{ID: "d1", Meta: runs.Meta{Type: "doomed"}}}); !m[0] {
		t.Fatal("d1 not marked queued")
	}
	if err := e.client.Enqueue(ctx, Envelope{ID: "d1", Type: "doomed", Payload: "data", Marked: true}, 0); err != nil {
		t.Fatal(err)
	}
	got := outcomes(t, 30*time.Second, atLeast(OutcomeDead, 1), c)
	if got[OutcomeRetried] != 2 || calls.Load() != 3 {
		t.Fatalf("outcomes %v after %d calls; want 2 retries and exactly 3 attempts", got, calls.Load())
	}
	c.stop()
	dl := NewDeadLetters(e.client, e.runs)
	list, err := dl.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("dead letters = %+v, %v", list, err)
	}
	if d := list[0]; d.RunID != "d1" || d.Attempts != 3 || !strings.Contains(d.Reason, "failed 3 of 3 attempts") ||
		!strings.Contains(d.Reason, "doomed attempt 3") || d.ID() != "d1" {
		t.Fatalf("dead letter = %+v", d)
	}
	r, err := e.runs.Get(ctx, "d1")
	if err != nil || r.State != runs.Dead || r.Attempts != 3 || r.LastError != "doomed attempt 3" {
		t.Fatalf("run = %+v, %v", r, err)
	}
	if n, _ := e.client.Depth(ctx); n != 0 {
		t.Fatalf("work queue depth %d after the task died", n)
	}

	if err := dl.Requeue(ctx, "nope"); !errors.Is(err, ErrNoDeadLetter) {
		t.Fatalf("Requeue unknown = %v", err)
	}
	if err := dl.Requeue(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.client.work.Peek(ctx, 32)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("work queue after requeue = %+v, %v", msgs, err)
	}
	env, err := DecodeEnvelope(msgs[0].Text)
	if err != nil || env.ID != "d1" || env.FailedAttempts != 0 || env.Payload != "data" || env.LastError != "" || !env.Marked {
		t.Fatalf("requeued envelope = %+v, %v", env, err)
	}
	if r, _ := e.runs.Get(ctx, "d1"); r.State != runs.Queued || r.Attempts != 0 {
		t.Fatalf("requeued run = %+v", r)
	}
	if list, _ := dl.List(ctx); len(list) != 0 {
		t.Fatalf("poison queue still holds %d records", len(list))
	}
}

// A handler running longer than the visibility timeout (3 s vs 8 s) is not
// delivered twice: its visibility is extended. Two consumers, no run
// records, so a second delivery would really run.
func TestAzureLongHandlerNotDeliveredTwice(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	var calls atomic.Int32
	h := map[string]leasecrontype.Handler{"long": func(ctx context.Context, _ leasecrontype.Task) error {
		calls.Add(1)
		select {
		case <-time.After(8 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	o := ConsumerOptions{ConsumerSettings: ConsumerSettings{VisibilityTimeout: 3 * time.Second}}
	a, b := e.start(o, h), e.start(o, h)
	if err := e.client.Enqueue(ctx, Envelope{ID: "long-1", Type: "long"}, 0); err != nil {
		t.Fatal(err)
	}
	outcomes(t, 30*time.Second, atLeast(OutcomeSucceeded, 1), a, b)
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	if n, _ := e.client.Depth(ctx); n != 0 {
		t.Fatalf("depth %d after success", n)
	}
}

// The same envelope enqueued twice runs once with run records, and the
// duplicate is counted. Worker A (one slot) runs the first copy; worker B
// gets the second while A runs, finds the claim held and puts it back; the
// redelivery after A's success is acknowledged as a duplicate.
func TestAzureDuplicateEnvelopeRunsOnce(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	var calls atomic.Int32
	started := make(chan struct{}, 2)
	h := map[string]leasecrontype.Handler{"once": func(context.Context, leasecrontype.Task) error {
		calls.Add(1)
		started <- struct{}{}
		time.Sleep(1500 * time.Millisecond)
		return nil
	}}
	o := ConsumerOptions{ConsumerSettings: ConsumerSettings{VisibilityTimeout: 3 * time.Second, Concurrency: 1}, Runs: e.runs}
	a := e.start(o, h)
	env := Envelope{ID: "dup-1", Type: "once", Due: time.Now().UTC()}
	if err := e.client.Enqueue(ctx, env, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("first copy never started")
	}
	b := e.start(o, h)
	if err := e.client.Enqueue(ctx, env, 0); err != nil {
		t.Fatal(err)
	}
	got := outcomes(t, 40*time.Second, func(m map[Outcome]int) bool {
		return m[OutcomeSucceeded] >= 1 && m[OutcomeDuplicate] >= 1
	}, a, b)
	if calls.Load() != 1 || got[OutcomeSucceeded] != 1 || got[OutcomeDuplicate] != 1 || got[OutcomeDeferred] < 1 {
		t.Fatalf("ran %d times; outcomes %v", calls.Load(), got)
	}
	if b.c.Stats().Total.Deferred < 1 {
		t.Fatal("worker B should have found the claim held and put the copy back")
	}
	r, err := e.runs.Get(ctx, "dup-1")
	if err != nil || r.State != runs.Succeeded || r.Duplicates != 1 || r.Type != "once" || r.Worker != a.c.o.InstanceID {
		t.Fatalf("run = %+v, %v", r, err)
	}
	dups := a.c.Stats().Total.Duplicates + b.c.Stats().Total.Duplicates
	if dups != 1 {
		t.Fatalf("consumers counted %d duplicates", dups)
	}
	// Counters reach the Runs table at shutdown.
	a.stop()
	b.stop()
	sum, err := e.runs.SumCounters(ctx)
	if err != nil || sum.Instances != 2 || sum.Total.Duplicates != 1 || sum.ByType["once"].Handled != 1 {
		t.Fatalf("SumCounters = %+v, %v", sum, err)
	}
}

// A run cancelled after it was moved is acknowledged without running.
func TestAzureCancelledRunAcked(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	var calls atomic.Int32
	c := e.start(ConsumerOptions{Runs: e.runs}, map[string]leasecrontype.Handler{"t": func(context.Context, leasecrontype.Task) error {
		calls.Add(1)
		return nil
	}})
	if err := e.client.Enqueue(ctx, Envelope{ID: "cx", Type: "t"}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if m := e.runs.MarkQueued(ctx, []runs.Mark{{ID: "cx", Meta: runs.Meta{Type: "t"}}}); !m[0] {
		t.Fatal("cx not marked queued")
	}
	if _, err := e.runs.Cancel(ctx, "cx"); err != nil {
		t.Fatal(err)
	}
	outcomes(t, 20*time.Second, atLeast(OutcomeCancelled, 1), c)
	if calls.Load() != 0 {
		t.Fatal("a cancelled run ran")
	}
	if r, _ := e.runs.Get(ctx, "cx"); r.State != runs.Cancelled {
		t.Fatalf("run = %+v", r)
	}
	if n, _ := e.client.Depth(ctx); n != 0 {
		t.Fatalf("depth %d: a cancelled run's message must be deleted", n)
	}
}

// Non-JSON and truncated messages are set aside with a reason, never dropped.
func TestAzureMalformedSetAside(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	c := e.start(ConsumerOptions{}, nil)
	bodies := []string{"hello, not JSON", `{"v":1,"id":"half","type":"t","pay`}
	for _, b := range bodies {
		if _, err := e.client.work.Enqueue(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	outcomes(t, 20*time.Second, atLeast(OutcomeMalformed, 2), c)
	list, err := NewDeadLetters(e.client, nil).List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("dead letters = %+v, %v", list, err)
	}
	for _, d := range list {
		if !strings.Contains(d.Reason, "not a JSON envelope") || (d.Body != bodies[0] && d.Body != bodies[1]) || d.MessageID == "" {
			t.Fatalf("dead letter = %+v", d)
		}
	}
	if n, _ := e.client.Depth(ctx); n != 0 {
		t.Fatalf("depth %d", n)
	}
}

// 100 messages, concurrency 8: every one handled exactly once, never more
// than 8 at a time.
func TestAzureHundredMessages(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]int{}
	var running, peak atomic.Int32
	c := e.start(ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 8}, Runs: e.runs}, map[string]leasecrontype.Handler{"bulk": func(_ context.Context, task leasecrontype.Task) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		seen[task.ID]++
		mu.Unlock()
		return nil
	}})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := e.client.Enqueue(ctx, Envelope{ID: fmt.Sprintf("bulk-%03d", i), Type: "bulk"}, 0); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	outcomes(t, 60*time.Second, atLeast(OutcomeSucceeded, 100), c)
	t.Logf("100 messages handled in %v (peak concurrency %d)", time.Since(start), peak.Load())
	if len(seen) != 100 {
		t.Fatalf("%d distinct tasks handled", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
	if p := peak.Load(); p > 8 || p < 2 {
		t.Fatalf("peak concurrency %d, want 2..8", p)
	}
	if n, _ := e.client.Depth(ctx); n != 0 {
		t.Fatalf("depth %d", n)
	}
	done, err := e.runs.Query(ctx, runs.Query{State: runs.Succeeded, Type: "bulk", Limit: 1000})
	if err != nil || len(done.Runs) != 100 {
		t.Fatalf("%d succeeded run records, %v", len(done.Runs), err)
	}
}

// More than 32 dead letters: List walks past Peek's limit and leaves the
// records visible; RequeueAll moves envelopes and leaves malformed ones.
func TestAzureDeadLettersBeyondPeekLimit(t *testing.T) {
	t.Parallel()
	e := newAz(t)
	ctx := context.Background()
	for i := 0; i < 35; i++ {
		body, _ := Envelope{V: 1, ID: fmt.Sprintf("dl-%02d", i), Type: "t", FailedAttempts: 5}.Encode()
		if err := e.client.SetAside(ctx, body, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, raw := range []string{"junk one", "junk two"} {
		t.Run(raw, func(t *testing.T) {
			if err := e.client.SetAside(ctx, raw, "malformed"); err != nil {
				t.Fatal(err)
			}
		})
	}
	dl := NewDeadLetters(e.client, e.runs)
	dl.scanVisibility = 10 * time.Second
	list, err := dl.List(ctx)
	if err != nil || len(list) != 37 {
		t.Fatalf("List = %d records, %v", len(list), err)
	}
	ids := map[string]bool{}
	for _, d := range list {
		ids[d.ID()] = true
		if d.Reason == "" || d.At.IsZero() {
			t.Fatalf("record = %+v", d)
		}
	}
	if len(ids) != 37 {
		t.Fatalf("%d distinct records", len(ids))
	}
	if peek, _ := e.client.Poison().Peek(ctx, 32); len(peek) != 32 {
		t.Fatalf("after List only %d records are visible", len(peek))
	}
	n, err := dl.RequeueAll(ctx)
	if err != nil || n != 35 {
		t.Fatalf("RequeueAll = %d, %v", n, err)
	}
	if d, _ := e.client.Depth(ctx); d != 35 {
		t.Fatalf("work depth %d after RequeueAll", d)
	}
	left, err := dl.List(ctx)
	if err != nil || len(left) != 2 {
		t.Fatalf("left = %+v, %v", left, err)
	}
	if err := dl.Requeue(ctx, left[0].ID()); !errors.Is(err, ErrNotRequeueable) {
		t.Fatalf("Requeue malformed = %v, want ErrNotRequeueable", err)
	}
	if n, err := dl.Purge(ctx); err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if left, _ := dl.List(ctx); len(left) != 0 {
		t.Fatalf("%d records after Purge", len(left))
	}
	if r, err := e.runs.Get(ctx, "dl-07"); err != nil || r.State != runs.Queued {
		t.Fatalf("requeued run = %+v, %v", r, err)
	}
}

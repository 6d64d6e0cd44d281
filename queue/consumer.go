package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Limiter caps how many tasks of a type run at once (across the fleet:
// trafficcop's Semaphore adapts to it). When Acquire reports !ok, or fails,
// the message is put back with a delay and the attempt is not counted.
type Limiter interface {
	// Acquire takes a slot for taskType. release is called when the task
	// ends; it is nil when !ok. A type without a limit is always ok.
	Acquire(ctx context.Context, taskType string) (release func(), ok bool, err error)
}

// PayloadFetcher resolves claim-check references (Envelope.PayloadBlob);
// payload.Store implements it.
type PayloadFetcher interface {
	// Get returns the payload a reference points to.
	Get(ctx context.Context, ref string) ([]byte, error)
	// Delete removes it; deleting a missing payload is not an error.
	Delete(ctx context.Context, ref string) error
}

// RunRecorder is the part of the Runs table the consumer uses; *runs.Store
// and *runs.Mem implement it. If it also has FlushCounters (both do), the
// consumer's counters are flushed there every CountersInterval.
type RunRecorder interface {
	Claim(ctx context.Context, id, worker string, attempt int, leaseUntil time.Time, m runs.Meta) (runs.Run, error)
	Extend(ctx context.Context, id, worker string, until time.Time) error
	Finish(ctx context.Context, id string, state runs.State, err error, outputTail string) error
}

type counterSink interface {
	FlushCounters(ctx context.Context, c runs.Counters) error
}

// Sentinel errors of the consumer.
var (
	// ErrNoHandler: no handler is registered for the task's type. It is a
	// failed attempt like any other, so a rolling deploy that adds the
	// handler still gets the task; after the last attempt the message is
	// set aside with this reason.
	ErrNoHandler = errors.New("no handler for type")
	// ErrPanic: the handler panicked (a failed attempt).
	ErrPanic = errors.New("handler panicked")
	// ErrHandlerTimeout: the handler ran past its timeout or
	// MaxRunTime (a failed attempt).
	ErrHandlerTimeout = errors.New("handler timed out")
	// ErrNoPayloadStore: the envelope names a payload blob but the
	// consumer has no PayloadFetcher (a failed attempt).
	ErrNoPayloadStore = errors.New("envelope has a payload blob but no payload store is configured")
	// ErrAlreadyRunning: Run was called twice.
	ErrAlreadyRunning = errors.New("consumer already running")
	// ErrHandlersStuck: Run returned while handlers that ignored their
	// cancelled context were still running.
	ErrHandlersStuck = errors.New("handlers did not return after cancellation")
	// ErrInvalidOptions is wrapped by option validation errors.
	ErrInvalidOptions = errors.New("invalid consumer options")
)

// ConsumerOptions configure a Consumer. Zero values take the documented
// defaults; negative durations and counts are refused.
type ConsumerOptions struct {
	// Queue is the work queue name. Default DefaultQueue.
	Queue string
	// PoisonQueue is where messages are set aside. Default DefaultPoisonQueue.
	PoisonQueue string
	// Concurrency is how many handlers run at once. Default 8.
	Concurrency int
	// VisibilityTimeout is how long a dequeued message stays hidden; it is
	// extended at 2/3 of its length while the handler runs
	// (worker.visibility_timeout). Default 60s; at least 1s.
	VisibilityTimeout time.Duration
	// MaxRunTime is the longest a handler may run; then its context is
	// cancelled and the attempt fails (worker.max_run_time). Default 30m.
	MaxRunTime time.Duration
	// MaxAttempts is how many attempts a task gets before it is dead and
	// set aside (retry.max_attempts); Envelope.MaxAttempts overrides it
	// per task. Default 5.
	MaxAttempts int
	// BackoffBase is the first retry delay; it doubles per failed attempt,
	// with jitter over [d/2, d] (retry.backoff_base). Default 2s. The
	// service counts visibility in whole seconds.
	BackoffBase time.Duration
	// BackoffMax caps the retry delay (retry.backoff_max). Default 10m.
	BackoffMax time.Duration
	// PollMin is the polling interval while messages flow. Default 200ms.
	PollMin time.Duration
	// PollMax caps the empty-queue polling backoff. Default 30s.
	PollMax time.Duration
	// ShutdownGrace is how long in-flight handlers may finish after the
	// Run context ends before their contexts are cancelled; Run then waits
	// as long again for them to return. Default 30s.
	ShutdownGrace time.Duration
	// HandlerTimeout bounds one handler call (capped by MaxRunTime).
	// Default MaxRunTime.
	HandlerTimeout time.Duration
	// HandlerTimeouts overrides HandlerTimeout per task type.
	HandlerTimeouts map[string]time.Duration
	// CrashMargin is how many deliveries without any recorded outcome (a
	// worker crashing on the message before it can update it) are tolerated
	// beyond MaxAttempts before the message is set aside. Default 2.
	CrashMargin int
	// CountersInterval is how often counters are flushed to Runs (when it
	// supports FlushCounters). Default 30s.
	CountersInterval time.Duration
	// StorageTimeout bounds each queue, table or blob call made for one
	// message. Default 30s.
	StorageTimeout time.Duration
	// InstanceID names this worker in run records and counters. Default
	// "{hostname}-{pid}-{random}".
	InstanceID string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives the consumer's logs. Default slog.Default().
	Logger *slog.Logger
	// Runs, when set, keeps run records and suppresses duplicates; nil
	// means no run records.
	Runs RunRecorder
	// Payloads resolves Envelope.PayloadBlob; nil means tasks with a
	// payload blob fail.
	Payloads PayloadFetcher
	// Limiter, when set, caps concurrency per task type.
	Limiter Limiter
	// Observer, when set, receives events for metrics.
	Observer Observer

	rand func() float64 // tests make jitter deterministic
}

func (o *ConsumerOptions) fill() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: ConsumerOptions.%s = %v: %s", ErrInvalidOptions, field, v, want)
	}
	durs := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"VisibilityTimeout", &o.VisibilityTimeout, 60 * time.Second},
		{"MaxRunTime", &o.MaxRunTime, 30 * time.Minute},
		{"BackoffBase", &o.BackoffBase, 2 * time.Second},
		{"BackoffMax", &o.BackoffMax, 10 * time.Minute},
		{"PollMin", &o.PollMin, 200 * time.Millisecond},
		{"PollMax", &o.PollMax, 30 * time.Second},
		{"ShutdownGrace", &o.ShutdownGrace, 30 * time.Second},
		{"CountersInterval", &o.CountersInterval, 30 * time.Second},
		{"StorageTimeout", &o.StorageTimeout, 30 * time.Second},
	}
	for _, d := range durs {
		if *d.p < 0 {
			return bad(d.name, *d.p, "must not be negative (0 means the default "+d.def.String()+")")
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	ints := []struct {
		name string
		p    *int
		def  int
	}{
		{"Concurrency", &o.Concurrency, 8},
		{"MaxAttempts", &o.MaxAttempts, 5},
		{"CrashMargin", &o.CrashMargin, 2},
	}
	for _, n := range ints {
		if *n.p < 0 {
			return bad(n.name, *n.p, fmt.Sprintf("must not be negative (0 means the default %d)", n.def))
		}
		if *n.p == 0 {
			*n.p = n.def
		}
	}
	switch {
	case o.VisibilityTimeout < time.Second || o.VisibilityTimeout > MaxVisibility:
		return bad("VisibilityTimeout", o.VisibilityTimeout, "want 1s to 168h")
	case o.BackoffMax < o.BackoffBase:
		return bad("BackoffMax", o.BackoffMax, fmt.Sprintf("must be at least BackoffBase (%v)", o.BackoffBase))
	case o.BackoffMax > MaxVisibility:
		return bad("BackoffMax", o.BackoffMax, "want at most 168h")
	case o.PollMax < o.PollMin:
		return bad("PollMax", o.PollMax, fmt.Sprintf("must be at least PollMin (%v)", o.PollMin))
	case o.Concurrency > 1024:
		return bad("Concurrency", o.Concurrency, "want 1 to 1024")
	}
	if o.HandlerTimeout < 0 {
		return bad("HandlerTimeout", o.HandlerTimeout, "must not be negative (0 means MaxRunTime)")
	}
	if o.HandlerTimeout == 0 || o.HandlerTimeout > o.MaxRunTime {
		o.HandlerTimeout = o.MaxRunTime
	}
	for typ, d := range o.HandlerTimeouts {
		if d <= 0 {
			return bad("HandlerTimeouts["+typ+"]", d, "must be positive")
		}
	}
	if o.InstanceID == "" {
		o.InstanceID = DefaultInstanceID()
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.rand == nil {
		o.rand = defaultRand
	}
	return nil
}

// DefaultInstanceID returns "{hostname}-{pid}-{4 random bytes in hex}".
func DefaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Consumer drains the work queue: it dequeues up to 32 messages at a time
// (never more than it has free handler slots; while the queue stays deep it
// waits up to 20 ms for half a batch of slots to free up, so that it does
// not pay a dequeue request for every slot), runs the handler registered
// for each message's type with bounded concurrency, deletes a message when
// its handler succeeds, retries failures with exponential backoff and
// jitter, extends the visibility of long-running tasks, and sets aside
// messages that are malformed or have used up their attempts.
//
// Attempts are counted in the envelope (the consumer rewrites the failed
// message in place with Attempt+1 and LastError), not by the service's
// dequeue count; the dequeue count only guards against a message that
// crashes workers before they can record anything (see CrashMargin).
//
// On-time delivery: producers round an initial delay down to whole seconds
// (see Client.Enqueue), so a message meant for a due time may become
// visible up to a second early. A delivered envelope whose Due is still
// ahead by at most 2 s (and half the visibility timeout) is held, in its
// handler slot, until Due on the consumer's clock: handlers never start
// before their due time. An envelope due further ahead runs at once. An
// idle consumer polls rarely (up to PollMax); WakeAt lets a producer in the
// same process say when a message it enqueued becomes due.
type Consumer struct {
	o        ConsumerOptions
	work     MessageQueue
	client   *Client
	log      *slog.Logger
	clk      clock.Clock
	slots    chan struct{}
	hmu      sync.RWMutex
	handlers map[string]leasecrontype.Handler
	running  sync.Mutex
	started  bool
	imu      sync.Mutex
	inFlight map[string]bool
	stats    statsState
	wakes    *wakeSet
	hooks    testHooks
}

// testHooks let tests wait for the consumer's internal steps instead of
// sleeping. All are optional and must not block.
type testHooks struct {
	idle     func(wait time.Duration) // the loop sleeps wait (its timer exists)
	extended func(id string, err error)
	grace    func() // a shutdown wait began (its timer exists)
	started  func(id string)
	finished func()                              // a message's goroutine is done (InFlight already lowered)
	early    func(id string, wait time.Duration) // a delivery is held until due (its timer exists)
}

// NewConsumer returns a consumer of the Azure Storage queues named in o.
func NewConsumer(sc *storage.Clients, o ConsumerOptions) (*Consumer, error) {
	co := ClientOptions{Queue: o.Queue, PoisonQueue: o.PoisonQueue, Clock: o.Clock, Logger: o.Logger}
	if err := co.fill(); err != nil {
		return nil, err
	}
	client, err := NewClient(sc, co)
	if err != nil {
		return nil, err
	}
	return newConsumer(client, o)
}

// NewConsumerWith returns a consumer of any pair of queues (MemQueue in
// tests and examples). The queue names in o are not used.
func NewConsumerWith(work, poison MessageQueue, o ConsumerOptions) (*Consumer, error) {
	return newConsumer(NewClientWith(work, poison, ClientOptions{Clock: o.Clock, Logger: o.Logger}), o)
}

func newConsumer(client *Client, o ConsumerOptions) (*Consumer, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	c := &Consumer{
		o: o, work: client.work, client: client, log: o.Logger.With("instance", o.InstanceID), clk: o.Clock,
		slots: make(chan struct{}, o.Concurrency), handlers: map[string]leasecrontype.Handler{}, inFlight: map[string]bool{},
		wakes: newWakeSet(),
	}
	c.client.clk = o.Clock
	c.stats.poll = o.PollMin
	return c, nil
}

// Handle registers h for taskType, replacing an earlier registration. It
// may be called while the consumer runs.
func (c *Consumer) Handle(taskType string, h leasecrontype.Handler) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if h == nil {
		delete(c.handlers, taskType)
		return
	}
	c.handlers[taskType] = h
}

func (c *Consumer) handler(taskType string) leasecrontype.Handler {
	c.hmu.RLock()
	defer c.hmu.RUnlock()
	return c.handlers[taskType]
}

// Instance returns the consumer's instance id.
func (c *Consumer) Instance() string { return c.o.InstanceID }

// Client returns the consumer's queue client (for SetAside, Depth).
func (c *Consumer) Client() *Client { return c.client }

// Stats returns a snapshot of the consumer's counters.
func (c *Consumer) Stats() Stats { return c.stats.snapshot(c.o.InstanceID) }

// Run consumes until ctx ends. Then it stops dequeuing, lets in-flight
// handlers finish within ShutdownGrace, cancels the contexts of those still
// running, and returns once they have all returned (waiting at most
// ShutdownGrace again; after that it returns ErrHandlersStuck). Messages
// whose handlers did not finish are released, never deleted. Run returns
// nil after a clean shutdown.
func (c *Consumer) Run(ctx context.Context) error {
	c.running.Lock()
	if c.started {
		c.running.Unlock()
		return ErrAlreadyRunning
	}
	c.started = true
	c.running.Unlock()

	// Handlers run under their own context, cancelled only after the grace.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	var wg sync.WaitGroup

	flushDone := make(chan struct{})
	sink, _ := c.o.Runs.(counterSink)
	stopFlush := make(chan struct{})
	if sink != nil {
		go func() {
			defer close(flushDone)
			c.flushLoop(sink, stopFlush)
		}()
	} else {
		close(flushDone)
	}

	c.log.Info("consumer started", "queue", c.work.Name(), "concurrency", c.o.Concurrency,
		"visibility_timeout", c.o.VisibilityTimeout, "max_attempts", c.o.MaxAttempts)
	c.loop(ctx, hctx, &wg)

	// Shutdown.
	c.log.Info("consumer stopping", "in_flight", c.Stats().InFlight, "grace", c.o.ShutdownGrace)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var result error
	if !c.waitFor(done, c.o.ShutdownGrace) {
		c.log.Warn("shutdown grace over: cancelling handlers", "in_flight", c.Stats().InFlight)
		hcancel()
		if !c.waitFor(done, c.o.ShutdownGrace) {
			result = fmt.Errorf("%w: %d still running", ErrHandlersStuck, c.Stats().InFlight)
			c.log.Error("handlers ignore cancellation; returning without them", "in_flight", c.Stats().InFlight)
		}
	}
	close(stopFlush)
	<-flushDone
	if sink != nil {
		fctx, cancel := c.opCtx(hctx)
		if err := sink.FlushCounters(fctx, c.Stats().toRuns()); err != nil {
			c.log.Warn("flushing counters failed", "err", err)
		}
		cancel()
	}
	c.log.Info("consumer stopped")
	return result
}

// waitFor waits for done for at most d on the consumer's clock.
func (c *Consumer) waitFor(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return true
	default:
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	if c.hooks.grace != nil {
		c.hooks.grace()
	}
	select {
	case <-done:
		return true
	case <-t.C():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

func (c *Consumer) flushLoop(sink counterSink, stop <-chan struct{}) {
	var last runs.Counters
	flushed := false
	for {
		t := c.clk.NewTimer(c.o.CountersInterval)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		cur := c.Stats().toRuns()
		if flushed && cur.Total == last.Total && reflect.DeepEqual(cur.ByType, last.ByType) {
			continue // nothing changed: an idle worker writes nothing
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.o.StorageTimeout)
		if err := sink.FlushCounters(ctx, cur); err != nil {
			c.log.Warn("flushing counters failed", "err", err)
		} else {
			last, flushed = cur, true
		}
		cancel()
	}
}

// loop dequeues and dispatches until ctx ends.
func (c *Consumer) loop(ctx, hctx context.Context, wg *sync.WaitGroup) {
	p := newPoller(c.o.PollMin, c.o.PollMax, c.o.rand)
	batch := min(MaxBatch, c.o.Concurrency)
	busy := false // the last dequeue filled every slot it asked for
	for ctx.Err() == nil {
		// Wait for one free slot, then take up to MaxBatch.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1 + c.takeSlots(MaxBatch-1, nil)
		if busy && n < batch/2 {
			// The queue has more: rather than pay a dequeue for every
			// few slots that free up, linger briefly until half of a
			// batch is free.
			t := time.NewTimer(batchLinger)
			n += c.takeSlots(batch/2-n, t.C)
			t.Stop()
		}
		msgs, err := c.work.Dequeue(ctx, n, c.o.VisibilityTimeout)
		busy = err == nil && len(msgs) == n
		for i := len(msgs); i < n; i++ {
			<-c.slots
		}
		var wait time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			wait = p.empty()
			c.log.Warn("dequeue failed", "err", err, "retry_in", wait)
		case len(msgs) == 0:
			wait = p.empty()
		default:
			p.got()
			if len(msgs) < n {
				wait = p.drained()
			}
		}
		c.stats.mu.Lock()
		c.stats.poll = p.interval()
		c.stats.mu.Unlock()
		if c.o.Observer != nil {
			c.o.Observer.OnPoll(len(msgs), wait)
		}
		for _, m := range msgs {
			wg.Add(1)
			c.stats.mu.Lock()
			c.stats.inFlight++
			c.stats.mu.Unlock()
			go func(m Message) {
				slot := &slotHold{held: true}
				defer func() {
					c.stats.mu.Lock()
					c.stats.inFlight--
					c.stats.mu.Unlock()
					if slot.held {
						<-c.slots
					}
					if c.hooks.finished != nil {
						c.hooks.finished()
					}
					wg.Done()
				}()
				c.process(ctx.Done(), hctx, m, slot)
			}(m)
		}
		if wait > 0 && !c.sleep(ctx, wait, p) {
			return
		}
	}
}

// batchLinger bounds how long a busy consumer waits for more free slots
// before it dequeues (real time: it only ever shortens to nothing).
const batchLinger = 20 * time.Millisecond

// takeSlots takes up to n more free handler slots and returns how many it
// took: the free ones at once, then, until linger fires (nil: no waiting),
// those that free up.
func (c *Consumer) takeSlots(n int, linger <-chan time.Time) int {
	took := 0
	for took < n {
		if linger == nil {
			select {
			case c.slots <- struct{}{}:
				took++
			default:
				return took
			}
			continue
		}
		select {
		case c.slots <- struct{}{}:
			took++
		case <-linger:
			return took
		}
	}
	return took
}

// opCtx returns a context for one storage call made on a message's behalf:
// not cancelled by shutdown, bounded by StorageTimeout.
func (c *Consumer) opCtx(hctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(hctx), c.o.StorageTimeout)
}

// delivery is the state of one message being processed.
type delivery struct {
	m       Message
	env     Envelope
	typ     string
	start   time.Time
	maxA    int
	log     *slog.Logger
	claimed bool
	slot    *slotHold // nil outside the consumer loop (tests)
}

// slotHold records whether a delivery holds one of the consumer's
// concurrency slots. A message that arrives before it is due gives its slot
// back while it waits, so waiting messages never keep due ones from running.
type slotHold struct{ held bool }

func (c *Consumer) settle(d *delivery, o Outcome) {
	typ := d.typ
	c.stats.add(typ, func(x *Counts) {
		switch o {
		case OutcomeSucceeded:
			x.Handled++
		case OutcomeRetried:
			x.Failed++
			x.Retried++
		case OutcomeDead:
			x.Dead++
			x.SetAside++
		case OutcomeDuplicate:
			x.Duplicates++
		case OutcomeCancelled:
			x.Cancelled++
		case OutcomeMalformed:
			x.SetAside++
		case OutcomeDeferred:
			x.Deferred++
		case OutcomeAbandoned:
			x.Abandoned++
		}
	})
	if c.o.Observer != nil {
		c.o.Observer.OnHandled(typ, o, c.clk.Now().Sub(d.start))
	}
}

// process takes one message through decode, guards, the wait until due,
// claim, handler and outcome. It never panics and never deletes a message
// unless the run succeeded, was a duplicate or cancelled, or was set aside.
// stop closes when the consumer begins to shut down.
func (c *Consumer) process(stop <-chan struct{}, hctx context.Context, m Message, slot *slotHold) {
	d := &delivery{m: m, start: c.clk.Now(), typ: MalformedType, slot: slot}
	d.log = c.log.With("message", m.ID)
	env, err := decodeBody(m.Text)
	if err != nil {
		reason := err.Error()
		d.log.Warn("setting aside a malformed message", "reason", reason, "dequeue_count", m.DequeueCount)
		rec := DeadLetter{Reason: reason, Body: m.Text, Queue: c.work.Name(), MessageID: m.ID,
			DequeueCount: m.DequeueCount, Worker: c.o.InstanceID}
		if c.setAsideAndDelete(hctx, d, rec) {
			c.settle(d, OutcomeMalformed)
		} else {
			c.settle(d, OutcomeLeft)
		}
		return
	}
	d.env, d.typ = env, env.Type
	d.log = d.log.With("task_id", env.ID, "type", env.Type, "attempt", env.Attempt+1)
	d.maxA = c.o.MaxAttempts
	if env.MaxAttempts > 0 {
		d.maxA = env.MaxAttempts
	}

	// Out of attempts already (an earlier set-aside failed, or MaxAttempts
	// was lowered): set aside without running.
	if env.Attempt >= d.maxA {
		c.dead(hctx, d, env, fmt.Sprintf("used %d of %d attempts; last error: %s", env.Attempt, d.maxA, env.LastError), nil, "")
		return
	}
	// Crash guard: deliveries with no recorded outcome count as attempts.
	unrecorded := m.DequeueCount - 1 - env.Dequeues
	if unrecorded > 0 && int64(env.Attempt)+unrecorded >= int64(d.maxA+c.o.CrashMargin) {
		reason := fmt.Sprintf("delivered %d times without an outcome being recorded (a worker may be crashing on it); %d failed attempts recorded, last error: %s",
			unrecorded, env.Attempt, env.LastError)
		c.dead(hctx, d, env, reason, nil, "")
		return
	}
	// The same run already in flight on this worker (a second copy of the
	// message): put this copy back.
	if !c.track(env.ID) {
		c.deferMsg(hctx, d, c.deferDelay(d), "already running on this worker")
		return
	}
	defer c.untrack(env.ID)

	// Enqueued early (its delay rounded down to whole seconds): hold it
	// until due. A shutdown meanwhile puts it back for another worker.
	if !c.untilDue(stop, d) {
		c.deferMsg(hctx, d, 0, "worker stopping before the task was due")
		return
	}

	if c.o.Limiter != nil {
		release, ok, err := c.o.Limiter.Acquire(hctx, env.Type)
		if err != nil || !ok {
			if err != nil {
				d.log.Warn("limiter failed; putting the message back", "err", err)
			}
			c.deferMsg(hctx, d, c.deferDelay(d), "no limiter slot")
			return
		}
		if release != nil {
			defer release()
		}
	}

	if c.o.Runs != nil && !c.claim(hctx, d) {
		return
	}

	out := trunc.NewWriter(leasecrontype.MaxOutputTail)
	task := leasecrontype.Task{ID: env.ID, Series: env.Series, Type: env.Type, Due: env.Due, Attempt: env.Attempt + 1,
		Generation: env.Generation}
	var herr error
	lost := false
	if h := c.handler(env.Type); h == nil {
		herr = fmt.Errorf("%w %q", ErrNoHandler, env.Type)
	} else if task.Payload, herr = c.fetchPayload(hctx, env); herr == nil {
		herr, lost = c.runHandler(hctx, d, h, task, out)
	}
	tail := trunc.Tail(joinOutput(out.String(), leasecrontype.OutputOf(herr)), leasecrontype.MaxOutputTail)

	switch {
	case lost:
		d.log.Warn("message visibility was lost while the handler ran; recording the result and leaving the message to reappear", "err", herr)
		if herr == nil {
			c.finish(hctx, d, runs.Succeeded, nil, tail)
			c.stats.add(d.typ, func(x *Counts) { x.Handled++ })
		} else {
			c.finish(hctx, d, runs.Failed, herr, tail)
			c.stats.add(d.typ, func(x *Counts) { x.Failed++ })
		}
		c.settle(d, OutcomeLost)
	case herr != nil && hctx.Err() != nil && !errors.Is(herr, ErrHandlerTimeout):
		c.abandon(d, tail)
	case herr == nil:
		c.succeed(hctx, d, tail)
	default:
		c.fail(hctx, d, herr, tail)
	}
}

func joinOutput(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

func (c *Consumer) track(id string) bool {
	c.imu.Lock()
	defer c.imu.Unlock()
	if c.inFlight[id] {
		return false
	}
	c.inFlight[id] = true
	return true
}

func (c *Consumer) untrack(id string) {
	c.imu.Lock()
	defer c.imu.Unlock()
	delete(c.inFlight, id)
}

// claim records the claim in Runs; it returns false when the message was
// settled without running. A Runs outage does not stop the task.
func (c *Consumer) claim(hctx context.Context, d *delivery) bool {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	now := c.clk.Now()
	r, err := c.o.Runs.Claim(ctx, d.env.ID, c.o.InstanceID, d.env.Attempt+1, now.Add(c.o.VisibilityTimeout),
		runs.Meta{Type: d.env.Type, Due: d.env.Due, Generation: d.env.Generation})
	switch {
	case err == nil:
		d.claimed = true
		return true
	case errors.Is(err, runs.ErrAlreadySucceeded):
		d.log.Info("run already succeeded; acknowledging a duplicate delivery")
		c.ack(hctx, d)
		c.settle(d, OutcomeDuplicate)
		return false
	case errors.Is(err, runs.ErrCancelled):
		d.log.Info("run was cancelled; acknowledging without running")
		if c.ack(hctx, d) {
			c.deletePayload(hctx, d)
		}
		c.settle(d, OutcomeCancelled)
		return false
	case errors.Is(err, runs.ErrClaimedElsewhere):
		wait := r.ClaimUntil.Sub(now)
		wait = min(max(wait, c.o.BackoffBase), c.o.VisibilityTimeout)
		wait += time.Duration(float64(c.o.BackoffBase) * c.o.rand())
		c.deferMsg(hctx, d, wait, "claimed by "+r.Worker)
		return false
	default:
		// At-least-once beats exactly-once: without a readable claim, run.
		d.log.Warn("run claim failed; running anyway", "err", err)
		return true
	}
}

// runHandler calls h with the task, extending the message's visibility
// until it returns. lost reports that an extension found the message gone
// (or its receipt stale): the message must then not be touched again.
func (c *Consumer) runHandler(hctx context.Context, d *delivery, h leasecrontype.Handler, task leasecrontype.Task, out *trunc.Writer) (herr error, lost bool) {
	timeout := c.o.HandlerTimeout
	if t, ok := c.o.HandlerTimeouts[task.Type]; ok {
		timeout = min(t, c.o.MaxRunTime)
	}
	rctx, cancel := context.WithCancelCause(leasecrontype.WithOutputWriter(hctx, out))
	defer cancel(nil)
	started := c.clk.Now()
	vis := c.o.VisibilityTimeout
	deadline := c.clk.NewTimer(timeout)
	defer deadline.Stop()
	ext := c.clk.NewTimer(vis * 2 / 3)
	defer func() { ext.Stop() }()
	done := make(chan error, 1)
	if c.hooks.started != nil {
		c.hooks.started(task.ID)
	}
	go func() { done <- call(rctx, h, task) }()
	timedOut := false
	extending := true
	for {
		select {
		case err := <-done:
			if timedOut && err != nil {
				err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, timeout, err)
			}
			return err, lost
		case <-deadline.C():
			timedOut = true
			d.log.Warn("handler timed out; cancelling it", "timeout", timeout)
			cancel(ErrHandlerTimeout)
		case <-ext.C():
			if !extending {
				continue
			}
			if c.clk.Now().Sub(started) > c.o.MaxRunTime+vis {
				d.log.Error("handler ignores cancellation; no longer extending its message", "running_for", c.clk.Now().Sub(started))
				extending = false
				continue
			}
			next := vis * 2 / 3
			ctx, cancelOp := c.opCtx(hctx)
			m, err := c.work.Update(ctx, d.m, d.m.Text, vis)
			switch {
			case err == nil:
				d.m = m
				if d.claimed {
					if err := c.o.Runs.Extend(ctx, d.env.ID, c.o.InstanceID, c.clk.Now().Add(vis)); err != nil {
						d.log.Debug("extending the run claim failed", "err", err)
					}
				}
			case errors.Is(err, ErrMessageGone):
				d.log.Warn("cannot extend visibility: message gone or redelivered", "err", err)
				lost = true
				extending = false
			default:
				next = min(vis/6, 5*time.Second)
				d.log.Warn("extending visibility failed; retrying", "err", err, "retry_in", next)
			}
			cancelOp()
			if c.hooks.extended != nil {
				c.hooks.extended(d.env.ID, err)
			}
			if extending {
				ext = c.clk.NewTimer(next)
			}
		}
	}
}

// call runs h, turning a panic into ErrPanic.
func call(ctx context.Context, h leasecrontype.Handler, t leasecrontype.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := string(debug.Stack())
			err = leasecrontype.WithOutput(fmt.Errorf("%w: %v", ErrPanic, r), stack)
		}
	}()
	return h(ctx, t)
}

func (c *Consumer) fetchPayload(hctx context.Context, env Envelope) ([]byte, error) {
	if env.PayloadBlob == "" {
		return []byte(env.Payload), nil
	}
	if c.o.Payloads == nil {
		return nil, fmt.Errorf("%w (blob %s)", ErrNoPayloadStore, env.PayloadBlob)
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	b, err := c.o.Payloads.Get(ctx, env.PayloadBlob)
	if err != nil {
		return nil, fmt.Errorf("fetch payload %s: %w", env.PayloadBlob, err)
	}
	return b, nil
}

// deletePayload removes a one-off task's payload blob once the task is done
// with; a series' blob is shared by its occurrences and is left alone.
func (c *Consumer) deletePayload(hctx context.Context, d *delivery) {
	if d.env.PayloadBlob == "" || d.env.Series != "" || c.o.Payloads == nil {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.o.Payloads.Delete(ctx, d.env.PayloadBlob); err != nil {
		d.log.Warn("deleting the payload blob failed", "blob", d.env.PayloadBlob, "err", err)
	}
}

func (c *Consumer) finish(hctx context.Context, d *delivery, st runs.State, err error, tail string) {
	if c.o.Runs == nil {
		return
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if ferr := c.o.Runs.Finish(ctx, d.env.ID, st, err, tail); ferr != nil {
		d.log.Warn("recording the run failed", "state", st, "err", ferr)
	}
}

// ack deletes the message; it reports whether it is gone.
func (c *Consumer) ack(hctx context.Context, d *delivery) bool {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.work.Delete(ctx, d.m); err != nil {
		if errors.Is(err, ErrMessageGone) {
			d.log.Warn("message was redelivered before it could be deleted", "err", err)
		} else {
			d.log.Warn("deleting the message failed; it will reappear", "err", err)
		}
		return false
	}
	return true
}

func (c *Consumer) succeed(hctx context.Context, d *delivery, tail string) {
	// Record success first: if the delete is lost, the redelivery is
	// recognised as a duplicate.
	c.finish(hctx, d, runs.Succeeded, nil, tail)
	if c.ack(hctx, d) {
		c.deletePayload(hctx, d)
	}
	d.log.Info("task succeeded", "took", c.clk.Now().Sub(d.start))
	c.settle(d, OutcomeSucceeded)
}

func (c *Consumer) fail(hctx context.Context, d *delivery, herr error, tail string) {
	env := d.env
	env.Attempt++
	env.LastError = trunc.Head(herr.Error(), 2<<10)
	env.Dequeues = d.m.DequeueCount
	if env.Attempt >= d.maxA {
		c.stats.add(d.typ, func(x *Counts) { x.Failed++ })
		reason := fmt.Sprintf("failed %d of %d attempts; last error: %s", env.Attempt, d.maxA, env.LastError)
		c.dead(hctx, d, env, reason, herr, tail)
		return
	}
	delay := jitter(Backoff(c.o.BackoffBase, c.o.BackoffMax, env.Attempt), c.o.rand())
	d.log.Info("attempt failed; retrying later", "err", herr, "retry_in", delay, "max_attempts", d.maxA)
	c.finish(hctx, d, runs.Failed, herr, tail)
	if c.rewrite(hctx, d, env, delay) {
		// This consumer knows when the retry becomes visible: wake for it
		// rather than leave it to a backed-off poll.
		c.WakeAt(c.clk.Now().Add(delay))
	} else {
		d.log.Warn("the message will reappear after its visibility timeout without this attempt counted")
	}
	c.settle(d, OutcomeRetried)
}

// rewrite updates the message in place with env, hidden for delay.
func (c *Consumer) rewrite(hctx context.Context, d *delivery, env Envelope, delay time.Duration) bool {
	text, err := encodeSized(env)
	if err != nil {
		// LastError grew the envelope past the limit: drop it.
		env.LastError = ""
		if text, err = encodeSized(env); err != nil {
			text = d.m.Text
		}
	}
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	m, err := c.work.Update(ctx, d.m, text, delay)
	if err != nil {
		d.log.Warn("updating the message failed", "err", err)
		return false
	}
	d.m = m
	return true
}

// deferMsg puts the message back for later without counting an attempt.
func (c *Consumer) deferMsg(hctx context.Context, d *delivery, delay time.Duration, why string) {
	env := d.env
	env.Dequeues = d.m.DequeueCount
	d.log.Debug("putting the message back", "why", why, "delay", delay)
	if c.rewrite(hctx, d, env, delay) {
		c.settle(d, OutcomeDeferred)
	} else {
		c.settle(d, OutcomeLeft)
	}
}

// deferDelay grows with how often the message has been put back
// (approximated by its dequeue count beyond its attempts), up to PollMax.
func (c *Consumer) deferDelay(d *delivery) time.Duration {
	k := d.m.DequeueCount - 1 - int64(d.env.Attempt)
	k = min(max(k, 0), 30)
	return jitter(Backoff(c.o.BackoffBase, min(c.o.BackoffMax, max(c.o.PollMax, c.o.BackoffBase)), int(k)+1), c.o.rand())
}

// dead sets the message aside with reason and deletes it; the run becomes
// dead. If the poison queue cannot be written the message is rewritten
// with its attempts used up, so the next delivery tries again without
// running the handler.
func (c *Consumer) dead(hctx context.Context, d *delivery, env Envelope, reason string, herr error, tail string) {
	body, err := encodeSized(env)
	if err != nil {
		body = d.m.Text
	}
	rec := DeadLetter{Reason: reason, Body: body, Queue: c.work.Name(), MessageID: d.m.ID, DequeueCount: d.m.DequeueCount,
		RunID: env.ID, Type: env.Type, Attempts: env.Attempt, Worker: c.o.InstanceID}
	d.log.Warn("task is dead; setting it aside", "reason", reason)
	if herr == nil {
		herr = errors.New(reason)
	}
	if !c.setAsideAndDelete(hctx, d, rec) {
		env.Attempt = max(env.Attempt, d.maxA)
		env.Dequeues = d.m.DequeueCount
		c.finish(hctx, d, runs.Failed, herr, tail)
		c.rewrite(hctx, d, env, jitter(Backoff(c.o.BackoffBase, c.o.BackoffMax, env.Attempt), c.o.rand()))
		c.settle(d, OutcomeLeft)
		return
	}
	c.finish(hctx, d, runs.Dead, herr, tail)
	c.settle(d, OutcomeDead)
}

// setAsideAndDelete writes rec to the poison queue, then deletes the
// message. It reports whether the record was written (the message is
// never deleted otherwise).
func (c *Consumer) setAsideAndDelete(hctx context.Context, d *delivery, rec DeadLetter) bool {
	ctx, cancel := c.opCtx(hctx)
	defer cancel()
	if err := c.client.setAside(ctx, rec); err != nil {
		d.log.Error("setting the message aside failed; leaving it", "err", err)
		return false
	}
	c.ack(hctx, d)
	return true
}

// abandon releases a message whose handler was cancelled by shutdown, so
// another worker can take it at once; the attempt is not counted.
func (c *Consumer) abandon(d *delivery, tail string) {
	ctx, cancel := c.opCtx(context.Background())
	defer cancel()
	env := d.env
	env.Dequeues = d.m.DequeueCount
	if text, err := encodeSized(env); err == nil {
		if _, err := c.work.Update(ctx, d.m, text, 0); err != nil {
			d.log.Warn("releasing the message failed; it reappears after its visibility timeout", "err", err)
		}
	}
	c.finish(ctx, d, runs.Queued, errors.New("worker shut down before the task finished"), tail)
	d.log.Info("handler cancelled by shutdown; message released")
	c.settle(d, OutcomeAbandoned)
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/leasecrontype"
)

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
	// ErrSlotLost: the concurrency slot of a running handler was lost (a
	// SlotLimiter's lease not renewed in time), and the handler's context
	// cancelled; the task is handed back without counting the attempt.
	ErrSlotLost = errors.New("concurrency slot lost")
	// ErrNoPayloadStore: the envelope names a payload blob but the
	// consumer has no PayloadFetcher (a failed attempt).
	ErrNoPayloadStore = errors.New("envelope has a payload blob but no payload store is configured")
	// ErrAlreadyRunning: Run was called twice.
	ErrAlreadyRunning = errors.New("consumer already running")
	// ErrTooManySnoozes: the handler snoozed more than MaxSnoozes times;
	// the snooze counts as a failed attempt.
	ErrTooManySnoozes = errors.New("snoozed too many times")
	// ErrHandlersStuck: Run returned while handlers that ignored their
	// cancelled context were still running.
	ErrHandlersStuck = errors.New("handlers did not return after cancellation")
	// ErrInvalidOptions is wrapped by option validation errors.
	ErrInvalidOptions = errors.New("invalid consumer options")
)

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
	settling chan struct{} // deliveries recording their outcome after giving their slot back
	hmu      sync.RWMutex
	handlers map[string]leasecrontype.Handler
	running  sync.Mutex
	started  bool
	imu      sync.Mutex
	inFlight map[string]bool
	stats    statsState
	wakes    *wakeSet
	// listening caps the polling interval at ListenEvery (Listen).
	listening atomic.Bool
	// lastFound is when a dequeue last got messages (Unix nanoseconds).
	lastFound atomic.Int64
	// pause is the pause state as last read and the paused messages held;
	// pause is the fleet's pause state as last read.
	pause pauseState
	// pauseRead serialises reads of the PauseSource (a ctxlock: a
	// delivery waiting behind a slow read gives up when its context ends
	// instead of waiting out the read).
	pauseRead ctxlock.Mutex
	tracer    trace.Tracer
	hooks     testHooks
	// misroutedAt is when a misrouted type was last warned of.
	mmu         sync.Mutex
	misroutedAt map[string]time.Time
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
	released func(n int)                         // the pause watcher showed n held messages again
}

// NewConsumer returns a consumer of the queues o names (default
// DefaultQueue and DefaultPoisonQueue) of the account behind svc, a queue
// service client the caller built with its own credential. It does not
// contact the service.
func NewConsumer(svc *azqueue.ServiceClient, o ConsumerOptions) (*Consumer, error) {
	co := ClientOptions{Queue: o.Queue, PoisonQueue: o.PoisonQueue, Queues: o.Queues, Consume: o.Consume,
		PriorityWeights: o.PriorityWeights, Routes: o.Routes, FairLanes: o.FairLanes, FairWeights: o.FairWeights, FairKeyFields: o.FairKeyFields,
		Clock: o.Clock, Logger: o.Logger}
	client, err := NewClient(svc, co)
	if err != nil {
		return nil, err
	}
	return newConsumer(client, o)
}

// NewConsumerWith returns a consumer of any pair of queues: AzureQueues
// built with their own clients, or MemQueues in tests and examples. The
// queue names in o are not used.
func NewConsumerWith(work, poison MessageQueue, o ConsumerOptions) (*Consumer, error) {
	return newConsumer(NewClientWith(work, poison, ClientOptions{Clock: o.Clock, Logger: o.Logger}), o)
}

func newConsumer(client *Client, o ConsumerOptions) (*Consumer, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{
		o: o, work: client.work, client: client, log: o.Logger.With("instance", o.InstanceID), clk: o.Clock,
		slots: make(chan struct{}, o.Concurrency), settling: make(chan struct{}, o.Concurrency), handlers: map[string]leasecrontype.Handler{}, inFlight: map[string]bool{},
		wakes: newWakeSet(), pause: pauseState{held: map[string]heldMsg{}}, misroutedAt: map[string]time.Time{},
		tracer: o.TracerProvider.Tracer(tracing.Name),
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

	stopCounters := c.startCounters(hctx)
	pausesDone := make(chan struct{})
	if c.o.Pauses != nil {
		go func() { defer close(pausesDone); c.watchPauses(ctx, hctx) }()
	} else {
		close(pausesDone)
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
	<-pausesDone
	stopCounters()
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

// opCtx returns a context for one storage call made on a message's behalf:
// not cancelled by shutdown, bounded by StorageTimeout.
func (c *Consumer) opCtx(hctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(hctx), c.o.StorageTimeout)
}

// transient runs op, each try under its own opCtx, and tries it again
// for transient faults (retry.Transient; tries 0: the policy's default).
func (c *Consumer) transient(hctx context.Context, tries int, op func(ctx context.Context) error) error {
	return retry.Transient(hctx, retry.Policy{Tries: tries, Clock: c.o.Clock}, func(context.Context) error {
		ctx, cancel := c.opCtx(hctx)
		defer cancel()
		return op(ctx)
	})
}

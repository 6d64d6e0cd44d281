package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/ops"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/presence"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// WorkerOptions configure NewWorker.
type WorkerOptions struct {
	// Storage locates the account. Required.
	Storage Storage
	// Names of the storage resources. Empty fields take defaults.
	Names Names
	// InstanceID names this instance in the lease, run records and logs.
	// Default {hostname}-{pid}-{8 random hex digits}; it must be valid in a
	// table key.
	InstanceID string

	// Lease is the traffic cop's timing (lease.*): the lease duration,
	// renewal, safety margin and how often a standby tries to take it.
	// Zero fields take trafficcop's defaults (60 s lease, renewed every
	// 20 s, tried every 15 s).
	Lease trafficcop.Timing
	// Mover configures moving due tasks while this instance leads
	// (mover.*, queue.max_depth, queue.resume_below). Zero fields take
	// schedule's defaults, except Early: 0 means one failover (lease
	// duration + lease poll, 75 s with the defaults), so that tasks
	// scheduled before a leader dies still start on time; negative
	// disables early enqueueing.
	Mover schedule.MoverSettings
	// ShardCycle is, with Names.Shards above 1, how often each instance
	// reads the shard map and the traffic cop looks at which instances
	// are live (shards.cycle). A killed instance's shards move within
	// Lease.LeaseDuration plus about two cycles. Default DefaultShardCycle.
	ShardCycle time.Duration
	// DrainCheck is how often the worker looks for a drain request
	// (Client.Drain, `leasecron drain`; worker.drain_check): one blob
	// metadata read each time, 360 an hour with the default
	// DefaultDrainCheck. Negative never looks (the instance cannot be
	// drained; stop it with SIGTERM).
	DrainCheck time.Duration
	// Consumer configures the queue consumer (worker.*, retry.*). Zero
	// fields take queue's defaults.
	Consumer queue.ConsumerSettings
	// Blackboard configures the blackboard loop (blackboard.*). Zero
	// fields take blackboard's defaults.
	Blackboard blackboard.Settings

	// NoLead keeps this instance out of the lease competition (it never
	// moves tasks).
	NoLead bool
	// NoConsume keeps this instance from taking tasks off the queue.
	NoConsume bool
	// NoBlackboard keeps this instance from walking the blackboard.
	NoBlackboard bool
	// NoRuns turns off run records (status, duplicate suppression, cancel
	// after move, run history). It saves about two table transactions per
	// task. Every worker and client of a fleet must agree on it
	// (ClientOptions.NoRuns). A worker with records refuses retentions
	// (Runs) shorter than its longest retry delay (Consumer.BackoffMax).
	NoRuns bool
	// Runs configures run records: retention and how often the leader
	// removes expired ones.
	Runs RunsOptions

	// Limits caps how many tasks of a type run at once across the fleet,
	// each running task holding one of N lease slots.
	Limits map[string]int
	// Rates caps how many tasks of a type start per time window across the
	// fleet (a task over its budget waits for it, without using an
	// attempt). Limits and Rates combine: a task needs a slot and budget.
	Rates map[string]RateLimit

	// Routing says where messages go (types.<type>.*, fairness.*): every
	// worker and client of a fleet should have the same.
	Routing Routing
	// Queues are the named queues this worker consumes (worker.queues),
	// each at every priority level. Default: the default queue and the
	// queues Routing.Types gives the types it has handlers for — a worker pool
	// takes exactly the work routed to it. A task of a type it has no
	// handler for that arrives anyway goes back without using an attempt
	// (counted as misrouted).
	Queues []string
	// PriorityWeights, when set (four weights, of levels 1 to 4; for
	// example 8, 4, 2, 1), makes the worker pick the priority level it
	// takes work from first by weight instead of strictly the highest, so
	// that low levels keep a share under a flood of high ones
	// (worker.priority_weights). Default strict.
	PriorityWeights []int

	// AdminAddr serves /healthz, /readyz and /metrics (e.g. ":8080");
	// empty disables.
	AdminAddr string
	// Pprof adds /debug/pprof to the admin address.
	Pprof bool
	// AdminHandler, when set, builds a handler that Run serves on
	// AdminAddr for every path the admin server does not serve itself
	// (/healthz, /readyz, /metrics, /debug/pprof), given a Client over this
	// worker's storage (Worker.Client): for example the web dashboard,
	// func(c *Client) (http.Handler, error) { return dashboard.New(c,
	// dashboard.Options{...}) }. Exposing it safely is the caller's part.
	AdminHandler func(c *Client) (http.Handler, error)
	// Version is reported in the build-info metric and on the dashboard's
	// fleet page. Default the module version from the build information
	// (or the VCS revision of a development build).
	Version string

	// Logger receives logs. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Default the real clock.
	Clock leasecrontype.Clock
	// TracerProvider receives the spans of moves and runs (see the README's
	// Traces section). Default the global provider (otel.GetTracerProvider),
	// which does nothing unless set up; the CLI sets one up from the
	// standard OTEL_* variables.
	TracerProvider trace.TracerProvider
}

// WithDefaults returns o with every zero field of its own set to its
// default (Lease, Mover, Consumer and Blackboard are settled by the
// packages they configure, when the worker builds its parts).
func (o WorkerOptions) WithDefaults() WorkerOptions {
	o.Names = o.Names.WithDefaults()
	o.Runs = o.Runs.WithDefaults()
	o.InstanceID = cmp.Or(o.InstanceID, instance.NewID())
	o.Version = cmp.Or(o.Version, instance.Version())
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.Clock = clock.OrReal(o.Clock)
	o.ShardCycle = cmp.Or(o.ShardCycle, DefaultShardCycle)
	o.DrainCheck = cmp.Or(o.DrainCheck, DefaultDrainCheck)
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	return o
}

// retentionCoversRetries refuses run retentions shorter than the longest
// retry delay: a failed run's record, or a cancelled one's, cleaned while
// its task's message waits to come back for a retry is no longer there to
// say so, and the retry then runs a cancelled task, a child --after it is
// released as if its parent had been cancelled, and its unique key is free
// while it is still live (a review's find).
func (o WorkerOptions) retentionCoversRetries() error {
	if o.NoRuns {
		return nil
	}
	backoff := o.Consumer.WithDefaults().BackoffMax
	why := fmt.Sprintf("at least Consumer.BackoffMax (%v, retry.backoff_max): a record cleaned while its task waits for a retry no longer stops a cancelled task, holds its unique key or keeps its --after children waiting", backoff)
	if o.Runs.Retention < backoff {
		return opt.Invalid(ErrInvalidOptions, "RunsOptions.Retention", o.Runs.Retention, why)
	}
	if o.Runs.RetentionFailed < backoff {
		return opt.Invalid(ErrInvalidOptions, "RunsOptions.RetentionFailed", o.Runs.RetentionFailed, why)
	}
	return nil
}

func (o WorkerOptions) validate() error {
	if err := o.Names.validate(); err != nil {
		return err
	}
	if err := o.Runs.validate(); err != nil {
		return err
	}
	if err := o.retentionCoversRetries(); err != nil {
		return err
	}
	if err := storage.ValidateKeyPart("InstanceID", o.InstanceID); err != nil {
		return fmt.Errorf("%w: WorkerOptions.%w", ErrInvalidOptions, err)
	}
	if o.ShardCycle < 50*time.Millisecond || o.ShardCycle > time.Minute {
		return opt.Invalid(ErrInvalidOptions, "WorkerOptions.ShardCycle", o.ShardCycle, "50ms to 1m, or 0 for the default "+DefaultShardCycle.String())
	}
	if o.DrainCheck > 0 && o.DrainCheck < 100*time.Millisecond || o.DrainCheck > 10*time.Minute {
		return opt.Invalid(ErrInvalidOptions, "WorkerOptions.DrainCheck", o.DrainCheck, "100ms to 10m, negative to never look, or 0 for the default "+DefaultDrainCheck.String())
	}
	if o.AdminHandler != nil && o.AdminAddr == "" {
		return fmt.Errorf("%w: WorkerOptions.AdminHandler needs AdminAddr (it is served there)", ErrInvalidOptions)
	}
	for typ, n := range o.Limits {
		if n < 1 || n > trafficcop.MaxSlots {
			return opt.Invalid(ErrInvalidOptions, "WorkerOptions.Limits["+typ+"]", n, fmt.Sprintf("1 to %d running tasks", trafficcop.MaxSlots))
		}
	}
	for typ, r := range o.Rates {
		if err := schedule.ValidateType(typ); err != nil {
			return fmt.Errorf("%w: WorkerOptions.Rates: %w", ErrInvalidOptions, err)
		}
		if err := r.validate(typ); err != nil {
			return err
		}
	}
	if err := o.Routing.validate("WorkerOptions"); err != nil {
		return err
	}
	for _, q := range o.Queues {
		if err := queue.ValidateRouteQueue(q); err != nil {
			return fmt.Errorf("%w: WorkerOptions.Queues: %w", ErrInvalidOptions, err)
		}
	}
	if o.PriorityWeights != nil {
		if err := (&queue.Queues{}).Weighted(o.PriorityWeights); err != nil {
			return fmt.Errorf("%w: WorkerOptions.PriorityWeights: %w", ErrInvalidOptions, err)
		}
	}
	return nil
}

// Worker is one leasecron instance: it competes for the lease and moves
// due tasks while it leads, consumes the queue, and walks the blackboard.
type Worker struct {
	parts
	fleet   *fleetNote // what the leader tells the others in the lease
	o       WorkerOptions
	counter *storage.Counter
	metrics *ops.Metrics
	log     *slog.Logger

	mu       sync.Mutex
	handlers map[string]leasecrontype.Handler
	// bulk runs bulk operations (bulkRunner).
	bulkOnce sync.Once
	bulk     leasecrontype.Handler
	cop      *trafficcop.Cop
	consumer *queue.Consumer
	slots    map[string]*trafficcop.Semaphore
	mover    *schedule.Mover
	// movers are the movers of the shards this instance owns (sharded).
	movers  map[string]*schedule.Mover
	owner   *shard.Owner
	sends   chan struct{} // the send slots every shard mover of this instance shares
	started bool
}

// NewWorker prepares a worker; handlers are added with Handle, then Run
// starts it.
func NewWorker(o WorkerOptions) (*Worker, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	w := &Worker{o: o, counter: storage.NewCounter(), metrics: ops.NewMetrics(), handlers: map[string]leasecrontype.Handler{}, slots: map[string]*trafficcop.Semaphore{},
		fleet: newFleetNote()}
	w.log = o.Logger.With("instance", o.InstanceID)
	w.metrics.SetBuildInfo(o.Version)
	w.counter.OnRequest = w.metrics.StorageRequest
	sc, err := storage.New(o.Storage.config(w.counter))
	if err != nil {
		return nil, err
	}
	if w.parts, err = newParts(sc, o.Names, o.Routing, o.NoRuns, o.Runs, 0, o.Version, o.Clock, w.log); err != nil {
		return nil, err
	}
	cc := w.sc.Blob.NewContainerClient(o.Names.Container)
	for typ, n := range o.Limits {
		if err := schedule.ValidateType(typ); err != nil {
			return nil, fmt.Errorf("Limits: %w", err)
		}
		sem, err := trafficcop.NewSemaphore(cc, typ, n, trafficcop.SemaphoreOptions{Clock: o.Clock, Logger: w.log,
			// Slots use the lease timing of the cop, so a crashed holder's
			// slot frees within lease.duration.
			LeaseTiming: o.Lease.LeaseTiming})
		if err != nil {
			return nil, fmt.Errorf("limits.%s: %w", typ, err)
		}
		w.slots[typ] = sem
	}
	if !o.NoLead {
		w.cop, err = trafficcop.NewCop(w.lease, trafficcop.Options{
			Timing:   o.Lease,
			Identity: o.InstanceID,
			Clock:    o.Clock,
			Logger:   w.log,
			Note:     w.wakeNote,
			OnNote:   w.heardWakeNote,
			Fleet:    w.fleet.text,
			OnFleet:  func(note string) { w.fleet.heard(o.InstanceID, note) },
			OnAcquired: func(t trafficcop.Term) {
				w.listen(true)
				w.metrics.LeaseAcquired()
				w.metrics.SetLeaseHeld(true)
				w.log.Info("leading", "generation", t.Generation)
			},
			OnLost: func(t trafficcop.Term, reason error) {
				w.listen(false)
				w.metrics.LeaseLost()
				w.metrics.SetLeaseHeld(false)
				w.log.Info("stopped leading", "generation", t.Generation, "reason", reason)
			},
		})
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// bulkRunner is the handler of bulk operations (BulkType), over a Client
// of this worker's storage made once.
func (w *Worker) bulkRunner() leasecrontype.Handler {
	w.bulkOnce.Do(func() {
		c := w.Client()
		w.bulk = c.runBulk
	})
	return w.bulk
}

// Handle registers the handler for a task type. Handlers serve queued
// tasks and blackboard keys alike. Call before Run. The type follows the
// rule of schedule.ValidateType (a type that cannot be scheduled could
// never reach its handler); Run refuses to start with one that does not.
func (w *Worker) Handle(taskType string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[taskType] = h
}

func (w *Worker) handler(taskType string) (leasecrontype.Handler, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.handlers[taskType]
	return h, ok
}

// MetricsHandler serves the worker's Prometheus metrics.
func (w *Worker) MetricsHandler() http.Handler { return w.metrics.Handler() }

// Client returns a Client over this worker's storage clients and options
// (its requests count in Worker.Requests), for example to serve the
// dashboard beside the worker (WorkerOptions.AdminHandler).
func (w *Worker) Client() *Client {
	return clientOf(w.parts, ClientOptions{Names: w.o.Names, NoRuns: w.o.NoRuns, Logger: w.log, Clock: w.o.Clock, Routing: w.o.Routing,
		Limits: w.o.Limits, MaxDepth: w.o.Mover.MaxDepth, ResumeBelow: w.o.Mover.ResumeBelow,
		SendWithin: cmp.Or(w.o.Mover.PollEvery, DefaultSendWithin)})
}

// listen makes the consumer poll hot while this instance leads, so that an
// idle fleet has one consumer that starts a task sent for now within a
// fraction of a second (queue.ConsumerSettings.ListenEvery).
func (w *Worker) listen(on bool) {
	w.mu.Lock()
	c := w.consumer
	w.mu.Unlock()
	if c != nil {
		c.Listen(on)
	}
}

// HasControl reports whether this instance currently leads.
func (w *Worker) HasControl() bool { return w.cop != nil && w.cop.HasControl() }

// Requests returns a snapshot of the storage requests this worker has
// made since NewWorker, by operation. Subtract an earlier snapshot (Sub) to
// count the requests of an interval.
func (w *Worker) Requests() RequestCounts { return requestCountsOf(w.counter) }

// Run starts every part of the worker and blocks until ctx ends, then
// shuts down gracefully: it stops dequeuing, lets in-flight tasks finish
// within the shutdown grace, and releases the lease so another instance
// takes over within one poll interval. It returns nil then. Drained
// (Client.Drain) it shuts down the same way and returns ErrDrained.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("leasecron: Worker.Run called twice")
	}
	w.started = true
	var bad []error
	for typ := range w.handlers {
		if err := schedule.ValidateType(typ); err != nil {
			bad = append(bad, fmt.Errorf("Handle: %w", err))
		}
	}
	w.mu.Unlock()
	if len(bad) > 0 {
		return errors.Join(bad...)
	}

	// A drain request ends runCtx as ctx's end would.
	runCtx, drain := context.WithCancelCause(ctx)
	defer drain(nil)
	g, gctx := errgroup.WithContext(runCtx)

	tables := []string{w.o.Names.ScheduleTable, w.o.Names.BlackboardTable}
	if w.runs != nil {
		tables = append(tables, w.o.Names.RunsTable)
	}
	var admin http.Handler
	var err error
	su := &startup{}
	if w.o.AdminHandler != nil {
		if admin, err = w.o.AdminHandler(w.Client()); err != nil {
			return fmt.Errorf("WorkerOptions.AdminHandler: %w", err)
		}
	}
	srv, err := ops.NewServer(ops.Options{
		Addr:     w.o.AdminAddr,
		Metrics:  w.metrics,
		Ready:    su.check(ops.ReadyCheck(w.sc, tables, w.queueNames())),
		Pprof:    w.o.Pprof,
		Logger:   w.log,
		Fallback: admin,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(gctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	// The admin address answers (not ready) while storage is not.
	if err := w.start(gctx, su); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// The consumer exists before the cop can lead: the mover wakes it.
	var consumer *queue.Consumer
	if !w.o.NoConsume {
		if consumer, err = w.newConsumer(); err != nil {
			return err
		}
	}
	if w.cop != nil {
		g.Go(func() error {
			err := w.cop.Run(gctx, w.lead)
			if gctx.Err() != nil {
				return nil
			}
			return err
		})
	}
	if w.cop != nil && w.sharded() {
		g.Go(func() error { return w.own(gctx) })
	}
	// Every worker shows on the fleet page from its start until every
	// other part has stopped, idle or busy, and takes drain requests.
	stopPresence := w.announce(ctx, drain)
	defer stopPresence()
	if w.cop != nil {
		g.Go(func() error { w.watchDrainRequests(gctx); return nil })
	}
	if consumer != nil {
		g.Go(func() error { return consumer.Run(gctx) })
		g.Go(func() error { w.drainOthers(gctx, consumer.Client(), consumer.Busy, consumer.Listening); return nil })
	}
	if !w.o.NoBlackboard {
		a, err := blackboard.NewWorker(w.sc.Table, blackboard.Options{
			Table:      w.o.Names.BlackboardTable,
			Settings:   w.o.Blackboard,
			InstanceID: w.o.InstanceID,
			Clock:      w.o.Clock,
			Logger:     w.o.Logger, // it adds "instance" itself
			Handlers:   w.handler,
			Hooks: blackboard.Hooks{OnRun: func(r blackboard.RunReport) {
				outcome := ops.OutcomeSucceeded
				if r.Err != nil {
					outcome = ops.OutcomeFailed
				}
				w.metrics.BlackboardRun(outcome)
			}},
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return a.Run(gctx) })
	}
	if w.o.AdminAddr != "" {
		// Gauges cost storage requests; refresh them only when someone
		// can scrape them.
		g.Go(func() error { w.gauges(gctx); return nil })
	}
	err = g.Wait()
	if ctx.Err() == nil && errors.Is(context.Cause(runCtx), ErrDrained) && (err == nil || errors.Is(err, context.Canceled)) {
		return ErrDrained
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// announce keeps this instance's presence until the returned stop is
// called (after every other part has stopped, so the fleet page shows a
// draining worker until it is gone), and ends the run with ErrDrained
// through drain when someone asks it to drain.
func (w *Worker) announce(ctx context.Context, drain context.CancelCauseFunc) (stop func()) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	a := &presence.Announcer{C: w.sc.Blob.NewContainerClient(w.o.Names.Container), Name: shard.MemberName(w.o.InstanceID),
		Instance: w.o.InstanceID, Version: w.o.Version, Clock: w.o.Clock, Logger: w.log.With("component", "presence"),
		DrainEvery: max(w.o.DrainCheck, 0), OnDrain: func(string) { drain(ErrDrained) }}
	if !w.o.NoConsume {
		a.Queues = w.consumes()
	} else {
		a.NoConsume = true
	}
	a.Roles = w.roles()
	if w.cop != nil {
		// A standby hears of a request in the leader's note (fleetNote).
		a.Relaxed = func() bool { return !w.HasControl() }
		w.fleet.mu.Lock()
		w.fleet.lookFor = a.Look
		w.fleet.mu.Unlock()
	}
	go func() {
		defer close(done)
		_ = a.Run(pctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// queueNames are the work queues and the poison queue.
func (w *Worker) queueNames() []string {
	return append(queue.QueueNames(w.o.Names.Queue, w.o.Names.Queues), w.o.Names.PoisonQueue)
}

// ensure creates the tables, queues and container on first use.
func (w *Worker) ensure(ctx context.Context) error {
	for _, t := range []string{w.o.Names.ScheduleTable, w.o.Names.BlackboardTable} {
		if err := w.sc.EnsureTable(ctx, t); err != nil {
			return err
		}
	}
	if w.runs != nil {
		if err := w.runLayout.size(ctx, true); err != nil {
			return err
		}
		if err := w.sc.EnsureTable(ctx, w.o.Names.RunsTable); err != nil {
			return err
		}
	}
	for _, q := range w.queueNames() {
		if err := w.sc.EnsureQueue(ctx, q); err != nil {
			return err
		}
	}
	return w.sc.EnsureContainer(ctx, w.o.Names.Container)
}

// lead runs while this instance holds the lease: it moves due tasks (or,
// sharded, balances the shards), and cleans the run records.
func (w *Worker) lead(ctx context.Context) error {
	term, _ := trafficcop.TermFrom(ctx)
	if w.sharded() {
		return w.duties(ctx, func(ctx context.Context) error { return w.balance(ctx, term.Generation) })
	}
	m, err := w.newMover([]string{schedule.DefaultShard}, term.Generation, earlyWindow(w.o.Mover, w.o.Lease), true, nil, nil)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.mover = m
	w.mu.Unlock()
	return w.duties(ctx, m.Run)
}

// duties runs main and, beside it, the traffic cop's fleet-wide duties:
// removing expired run records, and watching the parents whose messages
// do not say that others wait for them (every mover pass).
func (w *Worker) duties(ctx context.Context, main func(context.Context) error) error {
	if w.runs == nil {
		return main(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return main(gctx) })
	if w.o.Runs.CleanEvery >= 0 {
		g.Go(func() error { w.cleanRuns(gctx); return nil })
	}
	g.Go(func() error {
		w.Client().watchParents(gctx, min(cmp.Or(w.o.Mover.PollEvery, schedule.DefaultPollEvery), watchEvery))
		return nil
	})
	return g.Wait()
}

// newMover returns a mover of shards under the fencing generation gen.
// announce: its early sends are announced in the lease note (only the
// traffic cop writes one).
func (w *Worker) newMover(shards []string, gen int64, early time.Duration, announce bool, pace func(context.Context, schedule.PassReport) error, sends chan struct{}) (*schedule.Mover, error) {
	var enq schedule.Enqueuer = w.queue
	w.mu.Lock()
	if w.consumer != nil {
		enq = wakingEnqueuer{q: w.queue, clk: w.o.Clock, wake: w.consumer.WakeAt}
	}
	w.mu.Unlock()
	enq = tracingEnqueuer{next: enq, tracer: w.o.TracerProvider.Tracer(tracing.Name)}
	settings := w.o.Mover
	settings.Early = early
	mo := schedule.MoverOptions{
		MoverSettings: settings,
		Shards:        shards,
		Pace:          pace,
		SendSlots:     sends,
		Generation:    func() int64 { return gen },
		Enqueuer:      enq,
		SetAside:      w.queue,
		Depth:         w.queue.Depth,
		Visible:       w.queue.Visible,
		Counts:        w.queue.Counts,
		PayloadStore:  w.payloads,
		Clock:         w.o.Clock,
		Logger:        w.log,
		OnMoved:       func(_ context.Context, envs []queue.Envelope) { w.metrics.MoverBatch(len(envs)) },
	}
	w.mu.Lock()
	consumer, owner := w.consumer, w.owner
	w.mu.Unlock()
	if owner != nil && w.sharded() {
		// The other shards' owners send early into the same queues: their
		// rows say how many of the queue's messages only wait.
		mo.Peers = owner.Shards
	}
	// A message waiting in the queue for its due time: this worker's
	// consumer looks for it then, and the standbys hear of it with the
	// next note (announced at once rather than at the next renewal).
	mo.OnWaiting = func(due time.Time) {
		if consumer != nil {
			consumer.WakeAt(due)
		}
		if announce {
			w.cop.Announce()
		}
	}
	mo.GuardLive = func(ctx context.Context, g schedule.Guard) (bool, error) {
		return keepsGuard(ctx, w.sched, w.runs, w.o.Clock.Now(), g)
	}
	if w.runs != nil {
		mo.BeforeSendHold = w.markQueued
		mo.Confirm = w.confirmEarly
		mo.Unconfirm = w.unconfirmEarly
	}
	return schedule.NewMover(w.sched, mo)
}

// MoverStats returns the current (or last) mover's counters, and false if
// this instance has not led.
// Sharded, the counters are summed over the shards this instance moves
// (Generation is the highest epoch, LastPass the latest pass and
// LastMoveLag the largest lag).
func (w *Worker) MoverStats() (schedule.MoverStats, bool) {
	w.mu.Lock()
	m := w.mover
	var movers []*schedule.Mover
	for _, sm := range w.movers {
		movers = append(movers, sm)
	}
	w.mu.Unlock()
	if m == nil && len(movers) == 0 {
		return schedule.MoverStats{}, false
	}
	if m != nil {
		return m.Stats(), true
	}
	var sum schedule.MoverStats
	for _, sm := range movers {
		sum.Add(sm.Stats())
	}
	return sum, true
}

// ConsumerStats returns the consumer's counters (zero before Run).
func (w *Worker) ConsumerStats() queue.Stats {
	w.mu.Lock()
	c := w.consumer
	w.mu.Unlock()
	if c == nil {
		return queue.Stats{}
	}
	return c.Stats()
}

func (w *Worker) newConsumer() (*queue.Consumer, error) {
	rc := w.o.Routing.client(queue.ClientOptions{}) // the routing as every queue client has it
	co := queue.ConsumerOptions{
		ConsumerSettings: w.o.Consumer,
		Queue:            w.o.Names.Queue,
		Queues:           w.o.Names.Queues,
		Consume:          w.consumes(),
		PriorityWeights:  w.o.PriorityWeights,
		Routes:           rc.Routes,
		FairLanes:        rc.FairLanes,
		FairWeights:      rc.FairWeights,
		FairKeyFields:    rc.FairKeyFields,
		PoisonQueue:      w.o.Names.PoisonQueue,
		InstanceID:       w.o.InstanceID,
		Clock:            w.o.Clock,
		Logger:           w.o.Logger, // it adds "instance" itself
		Payloads:         w.payloads,
		TracerProvider:   w.o.TracerProvider,
		Observer:         observer{w.metrics},
	}
	if w.runs != nil {
		co.Runs = w.runs
		co.Current = w.Client().currentOrWatched
		co.OnEnd = w.Client().taskEnded
	}
	co.Pauses = w.pauses
	if len(w.slots) > 0 {
		co.Limiter = limiter{w.slots}
	}
	if len(w.o.Rates) > 0 {
		t, err := table.NewAzure(w.sc.Table, w.o.Names.ScheduleTable)
		if err != nil {
			return nil, err
		}
		co.Rates = newRateLimiter(t, w.o.Rates, w.o.Clock.Now)
	}
	c, err := queue.NewConsumer(w.sc.Queue, co)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	for typ, h := range w.handlers {
		c.Handle(typ, h)
	}
	w.mu.Unlock()
	if w.runs != nil {
		c.Handle(BulkType, w.bulkRunner())
	}
	w.mu.Lock()
	w.consumer = c
	w.mu.Unlock()
	return c, nil
}

// consumes returns the named queues the worker drains: WorkerOptions.Queues,
// else the default queue and those its handlers' types are routed to.
func (w *Worker) consumes() []string {
	if len(w.o.Queues) > 0 {
		return w.o.Queues
	}
	out := []string{queue.DefaultRouteQueue}
	w.mu.Lock()
	defer w.mu.Unlock()
	for typ := range w.handlers {
		if q := w.o.Routing.Types[typ].Queue; q != "" && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	slices.Sort(out[1:])
	return out
}

// gauges refreshes the queue-depth, backlog and slot gauges while the
// worker runs. Only the leader reads the backlog (one query per minute).
func (w *Worker) gauges(ctx context.Context) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if n, err := w.queue.Depth(cctx); err == nil {
			w.metrics.SetQueueDepth(n)
		}
		if w.HasControl() {
			if d, err := w.sched.Due(cctx, w.o.Clock.Now()); err == nil {
				w.metrics.SetDueBacklog(d.Count, d.Lag)
			}
			if ms, ok := w.MoverStats(); ok {
				w.metrics.SetMoverLag(ms.LastMoveLag)
			}
			if w.sharded() {
				w.metrics.SetShardLags(w.shardLags())
			}
			if qs, err := w.Client().Queues(cctx); err == nil {
				for _, q := range qs {
					w.metrics.SetNamedQueue(q.Queue, q.Priority, q.Depth, q.OldestWait)
				}
			}
		}
		for typ, s := range w.slots {
			if n, err := s.Held(cctx); err == nil {
				w.metrics.SetSlotsHeld(typ, n)
			}
		}
		cancel()
		if clock.Sleep(ctx, w.o.Clock, time.Minute) != nil {
			return
		}
	}
}

// wakingEnqueuer is the mover's Enqueuer: after each enqueue it tells the
// local consumer when the message will be visible, so an idle consumer
// (polling as rarely as worker.poll_max) still starts the task on time.
// Enqueue's return time plus the delay is never before the message is
// visible, whatever the queue's rounding.
type wakingEnqueuer struct {
	q    *queue.Client
	clk  clock.Clock
	wake func(time.Time)
}

func (e wakingEnqueuer) Enqueue(ctx context.Context, env queue.Envelope, delay time.Duration) error {
	if err := e.q.Enqueue(ctx, env, delay); err != nil {
		return err
	}
	e.wake(e.clk.Now().Add(max(delay, 0)))
	return nil
}

// observer feeds consumer events to the metrics.
type observer struct{ m *ops.Metrics }

func (o observer) OnHandled(taskType string, outcome queue.Outcome, d time.Duration) {
	o.m.TaskDone(taskType, string(outcome), d)
}

func (o observer) OnPoll(int, time.Duration) {}

func (o observer) OnTimed(taskType string, wait, run time.Duration) {
	o.m.TaskTimed(taskType, wait, run)
}

// limiter adapts per-type lease-slot semaphores to the consumer.
type limiter struct {
	slots map[string]*trafficcop.Semaphore
}

func (l limiter) Acquire(ctx context.Context, taskType string) (func(), bool, error) {
	slot, ok, err := l.AcquireSlot(ctx, taskType)
	if err != nil || !ok {
		return nil, ok, err
	}
	if slot == nil {
		return func() {}, true, nil
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = slot.Release(rctx)
	}, true, nil
}

var _ queue.SlotLimiter = limiter{}

// AcquireSlot is Acquire with the slot itself, which the consumer watches:
// a handler does not begin on a slot lost since, and is cancelled when its
// slot is lost while it runs (queue.SlotLimiter).
func (l limiter) AcquireSlot(ctx context.Context, taskType string) (queue.Slot, bool, error) {
	s, ok := l.slots[taskType]
	if !ok {
		return nil, true, nil
	}
	slot, err := s.TryAcquire(ctx)
	if errors.Is(err, trafficcop.ErrNoSlot) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return slot, true, nil
}

// roles are what this instance does, as its presence says (Instance.Roles).
func (w *Worker) roles() []string {
	roles := []string{}
	for _, r := range []struct {
		off  bool
		name string
	}{{w.o.NoLead, RoleLead}, {w.o.NoConsume, RoleConsume}, {w.o.NoBlackboard, RoleBlackboard}} {
		if !r.off {
			roles = append(roles, r.name)
		}
	}
	return roles
}

package queue

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Defaults of ConsumerOptions: the one place they are declared. The
// worker's configuration keys (worker.*, retry.*) take their defaults from
// here.
const (
	DefaultConcurrency       = 8
	DefaultVisibilityTimeout = 60 * time.Second
	DefaultMaxRunTime        = 30 * time.Minute
	DefaultMaxAttempts       = 5
	DefaultBackoffBase       = 2 * time.Second
	DefaultBackoffMax        = 10 * time.Minute
	DefaultPollMin           = 200 * time.Millisecond
	DefaultPollMax           = 30 * time.Second
	DefaultShutdownGrace     = 30 * time.Second
	DefaultCrashMargin       = 2
	DefaultMaxSnoozes        = 50
	DefaultCountersEvery     = 30 * time.Second
	DefaultStorageTimeout    = 30 * time.Second
	DefaultPauseCheck        = 5 * time.Second
	DefaultPauseHold         = 10 * time.Minute
	DefaultListenEvery       = 200 * time.Millisecond
	DefaultProgressEvery     = 5 * time.Second
)

// ConsumerSettings are the consumer's tunable settings, the part of
// ConsumerOptions a program configures (leasecron.WorkerOptions.Consumer
// takes them as they are). Zero values take the defaults; negative
// durations and counts are refused.
type ConsumerSettings struct {
	// Concurrency is how many handlers run at once. Default 8. Up to as
	// many more deliveries whose handlers have returned may be recording
	// their outcomes meanwhile (see the package documentation).
	Concurrency int
	// VisibilityTimeout is how long a dequeued message stays hidden; it is
	// extended at 2/3 of its length while the handler runs, and before it
	// begins when the delivery took that long to reach it
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
	// ListenEvery caps the polling interval while the consumer listens
	// (Consumer.Listen: leasecron's worker listens while it leads), so
	// that one consumer of an idle fleet picks up a task sent for now
	// within a fraction of a second (worker.listen_every). Default 200ms;
	// negative: never listen.
	ListenEvery time.Duration
	// ShutdownGrace is how long in-flight handlers may finish after the
	// Run context ends before their contexts are cancelled; Run then waits
	// as long again for them to return. Default 30s.
	ShutdownGrace time.Duration
	// HandlerTimeout bounds one handler call (capped by MaxRunTime).
	// Default MaxRunTime.
	HandlerTimeout time.Duration
	// HandlerTimeouts overrides HandlerTimeout per task type.
	HandlerTimeouts map[string]time.Duration
	// MaxSnoozes is how many times one run may snooze
	// (leasecrontype.Snooze) without using attempts (retry.max_snoozes);
	// each snooze beyond it is a failed attempt, so a task that snoozes
	// forever ends dead. Default 50.
	MaxSnoozes int
	// CrashMargin is how many deliveries without any recorded outcome (a
	// worker crashing on the message before it can update it) are tolerated
	// beyond MaxAttempts before the message is set aside. Default 2.
	CrashMargin int
	// CountersEvery is how often counters are flushed to Runs (when it
	// supports FlushCounters). Default 30s.
	CountersEvery time.Duration
	// StorageTimeout bounds each queue, table or blob call made for one
	// message. Default 30s.
	StorageTimeout time.Duration
	// PauseCheck is how long the pause state read from Pauses is trusted
	// before it is read again; it is read only while messages arrive or
	// paused messages are held, so an idle consumer reads nothing. Default
	// 5s.
	PauseCheck time.Duration
	// PauseHold is how long a message of a paused type is hidden when its
	// pause has no end; the consumer that hid it shows it again as soon as
	// it sees the type resumed, so this only matters when that consumer
	// stops first. A pause with an end hides its messages until then.
	// Default 10m.
	PauseHold time.Duration
	// ProgressEvery is the shortest time between two writes of a running
	// task's progress (leasecrontype.ReportProgress): a handler may
	// report as often as it likes, the latest report is written at most
	// this often, and the last one when the attempt ends
	// (worker.progress_every). Default 5s.
	ProgressEvery time.Duration
}

// ConsumerOptions configure a Consumer. Zero values take the documented
// defaults; negative durations and counts are refused.
type ConsumerOptions struct {
	// ConsumerSettings are the tunable settings (see there).
	ConsumerSettings
	// Queue is the work queue name. Default DefaultQueue.
	Queue string
	// PoisonQueue is where messages are set aside. Default DefaultPoisonQueue.
	PoisonQueue string
	// Queues is how many work queues it drains: Queue, Queue-1, … (see
	// ClientOptions.Queues). Default 1.
	Queues int
	// Consume are the named queues it drains, each at every priority
	// level (worker.queues). Default the default queue only.
	Consume []string
	// PriorityWeights, when set, makes it pick the priority level it asks
	// first by these weights of levels 1 to 4 instead of strictly the
	// highest (worker.priority_weights; see Queues.Weighted).
	PriorityWeights []int
	// Routes, FairLanes, FairWeights and FairKeyFields are the fleet's
	// routing (see ClientOptions): the consumer drains the routes
	// configured for the queues it consumes from the start, weighs
	// fairness lanes, and sends what it sends again by the same routes.
	Routes        map[string]Route
	FairLanes     int
	FairWeights   map[string]int
	FairKeyFields map[string]string
	// InstanceID names this worker in run records and counters. Default
	// "{hostname}-{pid}-{8 random hex digits}", the same form as every
	// leasecron default identity.
	InstanceID string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives the consumer's logs. Default slog.Default().
	Logger *slog.Logger
	// Runs, when set, keeps run records and suppresses duplicates; nil
	// means no run records.
	Runs RunRecorder
	// Current, when set with Runs, tells whether a message the mover sent
	// early (Envelope.Token) still stands for its task — its row in the
	// schedule still carries the token (schedule.Client.Current). The
	// consumer asks when the run record does not confirm the token
	// (leasecrontype.ErrRunUnconfirmed): a stale message (the task was
	// cancelled, rescheduled, replaced or deleted since it was sent) is
	// acknowledged without running (OutcomeSuperseded). Without Current
	// such a message runs.
	Current func(ctx context.Context, env Envelope) (bool, error)
	// Payloads resolves Envelope.PayloadBlob; nil means tasks with a
	// payload blob fail.
	Payloads PayloadFetcher
	// Limiter, when set, caps concurrency per task type.
	Limiter Limiter
	// Rates, when set, caps starts per time window (after Limiter gave a
	// slot): a task over its budget is put back until the budget frees,
	// without using an attempt.
	Rates RateLimiter
	// Pauses, when set, says which task types are paused fleet-wide: their
	// messages are put back without running (see PauseSource).
	Pauses PauseSource
	// Observer, when set, receives events for metrics.
	Observer Observer
	// OnEnd, when set, is called when the run of a message whose end
	// matters beyond its record (Envelope.Ends: a batch member, a task
	// others wait for) has ended — succeeded, dead or cancelled, including
	// a duplicate delivery of a run that already ended — after the run
	// record says so (or, when the record is already another scheduling's
	// of the id, after this run's end was left out of it) and before the
	// message is deleted or set aside; state is what the consumer saw.
	// It is called too, with RunDead, for a message that says others wait
	// for its run (Envelope.Waiters) when the run died and its dead letter
	// has been requeued since: that message may be the only one that
	// says so (the record is then live again, not ended). An
	// error leaves the message to reappear, so OnEnd is called again
	// (it must be idempotent): a worker that dies in between loses nothing.
	OnEnd func(ctx context.Context, env Envelope, state leasecrontype.RunState) error
	// TracerProvider makes the spans of each delivery (leasecron.run, with
	// leasecron.retry and leasecron.dead_letter inside), children of the
	// envelope's TraceParent. Default the global provider
	// (otel.GetTracerProvider), which does nothing unless a program sets
	// one up.
	TracerProvider trace.TracerProvider

	rand func() float64 // tests make jitter deterministic
}

// WithDefaults returns s with every zero field set to its default.
// HandlerTimeout defaults to MaxRunTime (and is capped by it).
func (s ConsumerSettings) WithDefaults() ConsumerSettings {
	s.Concurrency = cmp.Or(s.Concurrency, DefaultConcurrency)
	s.VisibilityTimeout = cmp.Or(s.VisibilityTimeout, DefaultVisibilityTimeout)
	s.MaxRunTime = cmp.Or(s.MaxRunTime, DefaultMaxRunTime)
	s.MaxAttempts = cmp.Or(s.MaxAttempts, DefaultMaxAttempts)
	s.BackoffBase = cmp.Or(s.BackoffBase, DefaultBackoffBase)
	s.BackoffMax = cmp.Or(s.BackoffMax, DefaultBackoffMax)
	s.PollMin = cmp.Or(s.PollMin, DefaultPollMin)
	s.PollMax = cmp.Or(s.PollMax, DefaultPollMax)
	s.ShutdownGrace = cmp.Or(s.ShutdownGrace, DefaultShutdownGrace)
	if s.HandlerTimeout == 0 || s.HandlerTimeout > s.MaxRunTime {
		s.HandlerTimeout = s.MaxRunTime
	}
	s.MaxSnoozes = cmp.Or(s.MaxSnoozes, DefaultMaxSnoozes)
	s.CrashMargin = cmp.Or(s.CrashMargin, DefaultCrashMargin)
	s.CountersEvery = cmp.Or(s.CountersEvery, DefaultCountersEvery)
	s.StorageTimeout = cmp.Or(s.StorageTimeout, DefaultStorageTimeout)
	s.PauseCheck = cmp.Or(s.PauseCheck, DefaultPauseCheck)
	s.PauseHold = cmp.Or(s.PauseHold, DefaultPauseHold)
	s.ListenEvery = cmp.Or(s.ListenEvery, DefaultListenEvery)
	s.ProgressEvery = cmp.Or(s.ProgressEvery, DefaultProgressEvery)
	return s
}

func (s ConsumerSettings) validate() error {
	const p = "ConsumerSettings."
	bad := func(field string, v any, want string) error {
		return opt.Invalid(ErrInvalidOptions, p+field, v, want)
	}
	if err := opt.First(
		opt.In(ErrInvalidOptions, p+"Concurrency", s.Concurrency, DefaultConcurrency, 1, 1024),
		opt.Positive(ErrInvalidOptions, p+"MaxRunTime", s.MaxRunTime, DefaultMaxRunTime),
		opt.Positive(ErrInvalidOptions, p+"MaxAttempts", s.MaxAttempts, DefaultMaxAttempts),
		opt.Positive(ErrInvalidOptions, p+"BackoffBase", s.BackoffBase, DefaultBackoffBase),
		opt.Positive(ErrInvalidOptions, p+"BackoffMax", s.BackoffMax, DefaultBackoffMax),
		opt.Positive(ErrInvalidOptions, p+"PollMin", s.PollMin, DefaultPollMin),
		opt.Positive(ErrInvalidOptions, p+"PollMax", s.PollMax, DefaultPollMax),
		opt.Positive(ErrInvalidOptions, p+"ShutdownGrace", s.ShutdownGrace, DefaultShutdownGrace),
		opt.Positive(ErrInvalidOptions, p+"MaxSnoozes", s.MaxSnoozes, DefaultMaxSnoozes),
		opt.Positive(ErrInvalidOptions, p+"CrashMargin", s.CrashMargin, DefaultCrashMargin),
		opt.Positive(ErrInvalidOptions, p+"CountersEvery", s.CountersEvery, DefaultCountersEvery),
		opt.Positive(ErrInvalidOptions, p+"StorageTimeout", s.StorageTimeout, DefaultStorageTimeout),
		opt.Positive(ErrInvalidOptions, p+"PauseCheck", s.PauseCheck, DefaultPauseCheck),
		opt.Positive(ErrInvalidOptions, p+"PauseHold", s.PauseHold, DefaultPauseHold),
		opt.Positive(ErrInvalidOptions, p+"ProgressEvery", s.ProgressEvery, DefaultProgressEvery),
	); err != nil {
		return err
	}
	switch {
	case s.VisibilityTimeout < time.Second || s.VisibilityTimeout > MaxVisibility:
		return bad("VisibilityTimeout", s.VisibilityTimeout, "1s to 168h, or 0 for the default 1m0s")
	case s.BackoffMax < s.BackoffBase:
		return bad("BackoffMax", s.BackoffMax, fmt.Sprintf("at least BackoffBase (%v)", s.BackoffBase))
	case s.PauseHold > MaxVisibility:
		return bad("PauseHold", s.PauseHold, "at most 168h")
	case s.BackoffMax > MaxVisibility:
		return bad("BackoffMax", s.BackoffMax, "at most 168h")
	case s.PollMax < s.PollMin:
		return bad("PollMax", s.PollMax, fmt.Sprintf("at least PollMin (%v)", s.PollMin))
	case s.ListenEvery > 0 && s.ListenEvery < 10*time.Millisecond:
		return bad("ListenEvery", s.ListenEvery, "at least 10ms, 0 for the default 200ms, or negative to never listen")
	case s.HandlerTimeout < 0:
		return bad("HandlerTimeout", s.HandlerTimeout, "a positive value, or 0 for MaxRunTime")
	}
	for typ, d := range s.HandlerTimeouts {
		if d <= 0 {
			return bad("HandlerTimeouts["+typ+"]", d, "a positive value")
		}
	}
	return nil
}

// WithDefaults returns o with every zero field set to its default.
func (o ConsumerOptions) WithDefaults() ConsumerOptions {
	o.ConsumerSettings = o.ConsumerSettings.WithDefaults()
	o.Queue = cmp.Or(o.Queue, DefaultQueue)
	o.PoisonQueue = cmp.Or(o.PoisonQueue, DefaultPoisonQueue)
	o.InstanceID = cmp.Or(o.InstanceID, instance.NewID())
	o.Clock = clock.OrReal(o.Clock)
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	o.Logger = cmp.Or(o.Logger, slog.Default())
	if o.rand == nil {
		o.rand = defaultRand
	}
	return o
}

func (o ConsumerOptions) validate() error { return o.ConsumerSettings.validate() }

package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/opt"
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
	DefaultCountersInterval  = 30 * time.Second
	DefaultStorageTimeout    = 30 * time.Second
	DefaultPauseCheck        = 5 * time.Second
	DefaultPauseHold         = 10 * time.Minute
)

// ConsumerOptions configure a Consumer. Zero values take the documented
// defaults; negative durations and counts are refused.
type ConsumerOptions struct {
	// Queue is the work queue name. Default DefaultQueue.
	Queue string
	// PoisonQueue is where messages are set aside. Default DefaultPoisonQueue.
	PoisonQueue string
	// Concurrency is how many handlers run at once. Default 8. Up to as
	// many more deliveries whose handlers have returned may be recording
	// their outcomes meanwhile (see the package documentation).
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
	// MaxSnoozes is how many times one run may snooze
	// (leasecrontype.Snooze) without using attempts (retry.max_snoozes);
	// each snooze beyond it is a failed attempt, so a task that snoozes
	// forever ends dead. Default 50.
	MaxSnoozes int
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
	// Pauses, when set, says which task types are paused fleet-wide: their
	// messages are put back without running (see PauseSource).
	Pauses PauseSource
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
	// Observer, when set, receives events for metrics.
	Observer Observer
	// TracerProvider makes the spans of each delivery (leasecron.run, with
	// leasecron.retry and leasecron.dead_letter inside), children of the
	// envelope's TraceParent. Default the global provider
	// (otel.GetTracerProvider), which does nothing unless a program sets
	// one up.
	TracerProvider trace.TracerProvider

	rand func() float64 // tests make jitter deterministic
}

func (o *ConsumerOptions) fill() error {
	bad := func(field string, v any, want string) error {
		return opt.Invalid(ErrInvalidOptions, "ConsumerOptions."+field, v, want)
	}
	for _, d := range []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"VisibilityTimeout", &o.VisibilityTimeout, DefaultVisibilityTimeout},
		{"MaxRunTime", &o.MaxRunTime, DefaultMaxRunTime},
		{"BackoffBase", &o.BackoffBase, DefaultBackoffBase},
		{"BackoffMax", &o.BackoffMax, DefaultBackoffMax},
		{"PollMin", &o.PollMin, DefaultPollMin},
		{"PollMax", &o.PollMax, DefaultPollMax},
		{"ShutdownGrace", &o.ShutdownGrace, DefaultShutdownGrace},
		{"CountersInterval", &o.CountersInterval, DefaultCountersInterval},
		{"StorageTimeout", &o.StorageTimeout, DefaultStorageTimeout},
		{"PauseCheck", &o.PauseCheck, DefaultPauseCheck},
		{"PauseHold", &o.PauseHold, DefaultPauseHold},
	} {
		if err := opt.Default(ErrInvalidOptions, "ConsumerOptions."+d.name, d.p, d.def); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		name string
		p    *int
		def  int
	}{
		{"Concurrency", &o.Concurrency, DefaultConcurrency},
		{"MaxAttempts", &o.MaxAttempts, DefaultMaxAttempts},
		{"CrashMargin", &o.CrashMargin, DefaultCrashMargin},
		{"MaxSnoozes", &o.MaxSnoozes, DefaultMaxSnoozes},
	} {
		if err := opt.Default(ErrInvalidOptions, "ConsumerOptions."+n.name, n.p, n.def); err != nil {
			return err
		}
	}
	switch {
	case o.VisibilityTimeout < time.Second || o.VisibilityTimeout > MaxVisibility:
		return bad("VisibilityTimeout", o.VisibilityTimeout, "1s to 168h")
	case o.BackoffMax < o.BackoffBase:
		return bad("BackoffMax", o.BackoffMax, fmt.Sprintf("at least BackoffBase (%v)", o.BackoffBase))
	case o.PauseHold > MaxVisibility:
		return bad("PauseHold", o.PauseHold, "at most 168h")
	case o.BackoffMax > MaxVisibility:
		return bad("BackoffMax", o.BackoffMax, "at most 168h")
	case o.PollMax < o.PollMin:
		return bad("PollMax", o.PollMax, fmt.Sprintf("at least PollMin (%v)", o.PollMin))
	case o.Concurrency > 1024:
		return bad("Concurrency", o.Concurrency, "1 to 1024")
	}
	if o.HandlerTimeout < 0 {
		return bad("HandlerTimeout", o.HandlerTimeout, "a positive value, or 0 for MaxRunTime")
	}
	if o.HandlerTimeout == 0 || o.HandlerTimeout > o.MaxRunTime {
		o.HandlerTimeout = o.MaxRunTime
	}
	for typ, d := range o.HandlerTimeouts {
		if d <= 0 {
			return bad("HandlerTimeouts["+typ+"]", d, "a positive value")
		}
	}
	if o.InstanceID == "" {
		o.InstanceID = instance.NewID()
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.rand == nil {
		o.rand = defaultRand
	}
	return nil
}

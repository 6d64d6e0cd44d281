// Package config loads leasecron's configuration from a YAML file, the
// environment and flags (through one viper instance per command tree) and
// reports unknown keys and bad values by name.
//
// Its files follow the seams of the job: keys.go lists every key with its
// default (taken from the packages that apply it, so each default is
// declared once) and renders the list for `leasecron config --keys` and the
// README; env.go maps environment variables onto keys; decode.go turns the
// merged sources into a Config and validates it; redact.go shows the
// effective configuration with secrets hidden.
package config

import (
	"errors"
	"net/netip"
	"time"

	"github.com/leasecron/leasecron"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// Config is the effective configuration of a leasecron process.
type Config struct {
	// Storage and Names are the root package's own types, so the
	// configuration reaches leasecron.NewClient and NewWorker unmapped.
	Storage    leasecron.Storage
	Names      leasecron.Names
	Lease      Lease
	Mover      Mover
	Shards     Shards
	Queue      Queue
	Worker     Worker
	Runs       Runs
	Retry      Retry
	Payload    Payload
	Blackboard Blackboard
	Admin      Admin
	API        API
	HTTP       HTTP
	Dashboard  Dashboard
	Log        Log
	// Handlers maps a task type to how it is handled.
	Handlers map[string]Handler
	// Limits maps a task type to its fleet-wide concurrency limit.
	Limits map[string]int
	// Rates maps a task type to its fleet-wide rate limit
	// (limits.<type>.rate and .rate_key).
	Rates map[string]leasecron.RateLimit
	// Routing is types.<type>.queue and .priority, fairness.lanes and
	// fairness.weights.
	Routing leasecron.Routing
	// Deprecated says which keys were set by an earlier name (see Renamed).
	Deprecated []string
}

// Lease configures the traffic cop.
type Lease struct {
	Duration     time.Duration
	RenewEvery   time.Duration
	PollEvery    time.Duration
	SafetyMargin time.Duration
}

// Mover configures the mover.
type Mover struct {
	PollEvery   time.Duration
	Early       time.Duration
	Concurrency int
}

// Shards configures a sharded schedule (shards.cycle; shards.count is
// Names.Shards).
type Shards struct {
	Cycle time.Duration
}

// Queue configures backpressure.
type Queue struct {
	MaxDepth    int
	ResumeBelow int
}

// Worker configures the consumer pool.
type Worker struct {
	Concurrency       int
	VisibilityTimeout time.Duration
	MaxRunTime        time.Duration
	InstanceID        string
	ShutdownGrace     time.Duration
	PollMin           time.Duration
	PollMax           time.Duration
	ListenEvery       time.Duration
	CountersEvery     time.Duration
	PauseCheck        time.Duration
	PauseHold         time.Duration
	ProgressEvery     time.Duration
	DrainCheck        time.Duration
	// Queues are the named queues consumed (worker.queues); empty: the
	// default queue and those of the handlers' types.
	Queues []string
	// PriorityWeights are the weights of priority levels 1 to 4
	// (worker.priority_weights); empty: strict priorities.
	PriorityWeights []int
	Runs            bool
	Lead            bool
	Consume         bool
}

// Runs configures run records.
type Runs struct {
	Retention       time.Duration
	RetentionFailed time.Duration
	AuditRetention  time.Duration
	CleanEvery      time.Duration
}

// Retry configures failed-attempt backoff.
type Retry struct {
	MaxAttempts int
	BackoffBase time.Duration
	BackoffMax  time.Duration
	MaxSnoozes  int
}

// Payload configures payload limits.
type Payload struct {
	MaxSize int
}

// Blackboard configures the blackboard worker.
type Blackboard struct {
	Enabled bool
	Cycle   time.Duration
	LockTTL time.Duration
}

// Admin configures the operations endpoints.
type Admin struct {
	Addr      string
	Pprof     bool
	Dashboard bool
	// API serves the HTTP API on the admin address.
	API bool
}

// API configures the HTTP API for programs.
type API struct {
	Enabled      bool
	PlatformAuth bool
	MaxBody      int
	MaxTasks     int
}

// HTTP configures what the dashboard and the API share.
type HTTP struct {
	// TrustedProxies are the proxies whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// ProxyHops counts the proxies in front that append to it.
	ProxyHops int
}

// Dashboard configures the web dashboard.
type Dashboard struct {
	Addr           string
	Auth           string
	ViewerAuth     string
	PlatformAuth   bool
	OperatorRole   string
	BasePath       string
	ReadOnly       bool
	AllowAnonymous bool
}

// Log configures logging.
type Log struct {
	Level  string
	Format string
}

// Handler configures one task type. Exactly one of Exec, HTTP or a
// built-in Kind applies.
type Handler struct {
	// Kind is exec, http, log or calendar; inferred from Exec/HTTP if empty.
	Kind    string
	Exec    []string
	HTTP    string
	Method  string
	Headers map[string]string
	// Timeout bounds one run. An exec handler without one gets
	// worker.max_run_time (the longest any handler may run); an http
	// handler without one gets handler.DefaultHTTPTimeout.
	Timeout time.Duration
}

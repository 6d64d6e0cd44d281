package dashboard

import (
	"context"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Source is what the dashboard reads and does. The root package's Client
// implements it (through a small adapter in leasecron's dashboard.go), so
// every action takes the same code path as the CLI.
type Source interface {
	// Stats is the fleet snapshot of the overview.
	Stats(ctx context.Context) (Stats, error)
	// Throughput returns per-minute outcome counts since a time, oldest
	// first.
	Throughput(ctx context.Context, since time.Time) ([]Minute, error)
	// Pending returns one page of pending tasks in due order.
	Pending(ctx context.Context, q PendingQuery) (PendingPage, error)
	// Task returns what is known about one task or run id; it wraps
	// leasecrontype.ErrNotFound when nothing is.
	Task(ctx context.Context, id string) (Task, error)
	// Runs returns one page of run records, newest first.
	Runs(ctx context.Context, q RunQuery) (RunPage, error)
	Batch(ctx context.Context, id string) (Batch, error)
	// Recent returns the latest outcomes of up to n occurrences of a
	// series, newest first (from its summary where there is one: a point
	// read).
	Recent(ctx context.Context, series string, n int) ([]leasecrontype.Run, error)
	// DeadLetters returns up to n of the oldest dead letters and how many
	// there are in all.
	DeadLetters(ctx context.Context, n int) ([]queue.DeadLetter, int, error)
	// Blackboard returns every blackboard key.
	Blackboard(ctx context.Context) ([]blackboard.Entry, error)
	// Fleet returns the instances seen, the lease holder and the slots.
	Fleet(ctx context.Context) (Fleet, error)
	// Instances returns the instances seen (the overview's fleet size).
	Instances(ctx context.Context) ([]Instance, error)

	// Schedule adds a task (the `leasecron schedule` path).
	Schedule(ctx context.Context, it schedule.Item, replace bool) (schedule.Item, error)
	// Cancel cancels a task (`leasecron cancel`) and says what it did.
	Cancel(ctx context.Context, id string) (string, error)
	// Reschedule moves a pending task (`leasecron reschedule`).
	Reschedule(ctx context.Context, id string, due time.Time) (schedule.Item, error)
	// Disable stops a recurring series without deleting it (`leasecron
	// disable`); Enable runs it again (`leasecron enable`).
	Disable(ctx context.Context, id string) (schedule.Item, error)
	Enable(ctx context.Context, id string) (schedule.Item, error)
	// Latency reports queue wait, run time and outcomes per step
	// (leasecron.Client.Latency).
	Latency(ctx context.Context, rng time.Duration, typ string) (leasecron.LatencyReport, error)
	// CountBulk, StartBulk, Bulk and Bulks are the bulk operations
	// (leasecron.Client's).
	CountBulk(ctx context.Context, op leasecron.BulkOp) (int, error)
	StartBulk(ctx context.Context, op leasecron.BulkOp, expect int, by string) (leasecron.Bulk, error)
	Bulk(ctx context.Context, id string) (leasecron.Bulk, error)
	Bulks(ctx context.Context) ([]leasecron.Bulk, error)
	// Drain asks a running instance to drain (`leasecron drain`); by
	// names who asks.
	// Drain asks instance id to drain, and says what no other running
	// instance does once it has stopped (leasecron.Uncovered).
	Drain(ctx context.Context, id, by string) (uncovered []string, err error)
	// Search answers a parsed search (leasecron.Client.Search).
	Search(ctx context.Context, q leasecron.SearchQuery) (leasecron.SearchResult, error)
	// Audit records an action in the audit log; AuditLog reads a page of
	// it (leasecron.Client.Audit, AuditLog).
	Audit(ctx context.Context, e leasecron.AuditEntry) error
	AuditLog(ctx context.Context, q leasecron.AuditQuery) (leasecron.AuditPage, error)
	// RunNow makes a pending task, or a series' next occurrence, due now.
	RunNow(ctx context.Context, id string) (schedule.Item, error)
	// Requeue puts one dead letter back on the work queue.
	Requeue(ctx context.Context, id string) error
	// RequeueAll puts every requeueable dead letter back.
	RequeueAll(ctx context.Context) (int, error)
	// Purge deletes every dead letter.
	Purge(ctx context.Context) (int, error)
	// RunKeyNow makes a blackboard key due at the next cycle.
	RunKeyNow(ctx context.Context, key string) error
	// RemoveKey removes a blackboard key.
	RemoveKey(ctx context.Context, key string) error
}

// Stats is the overview's snapshot.
type Stats struct {
	QueueDepth  int
	PoisonDepth int
	DueCount    int
	DueCapped   bool
	OldestDue   time.Time
	DueLag      time.Duration
	Leader      trafficcop.HolderInfo
	// Counters are the fleet's summed counters; nil when run records are
	// off.
	Counters *Counts
	// Instances is the number of counter rows summed.
	Instances int
	// Backpressure is on when queue.max_depth is configured; HoldingBack
	// says whether the mover is holding back now.
	Backpressure bool
	HoldingBack  bool
	MaxDepth     int
	ResumeBelow  int
	// Limits are the slots per limited type.
	Limits []Limit
	// Paused lists task types whose runs are paused (empty when none).
	Paused []Pause
	// Queues are the named queues and priority levels with work queues
	// in the account (leasecron.Client.Queues).
	Queues []leasecron.QueueStatus
}

// Pause is one paused task type.
type Pause struct {
	Type  string
	Until time.Time
}

// Counts are cumulative outcome counts (the CLI's stats).
type Counts = leasecrontype.Counts

// Limit is one limited type's slots.
type Limit struct {
	Type     string `json:"type"`
	Limit    int    `json:"limit"`
	Held     int    `json:"held"`
	Deferred int64  `json:"deferred"`
}

// Minute is one minute of fleet outcomes.
type Minute struct {
	Minute    time.Time
	Succeeded int64
	Failed    int64
	Retried   int64
	Dead      int64
	Cancelled int64
}

// PendingQuery selects pending tasks.
type PendingQuery struct {
	// Type keeps tasks of this type ("" = any).
	Type string
	// Recurring keeps only recurring series.
	Recurring bool
	// Limit is the page size.
	Limit int
	// Continue is the token of the previous page.
	Continue string
}

// PendingPage is one page of pending tasks.
type PendingPage struct {
	Items    []schedule.Item
	Continue string
}

// Task is what is known about one id.
type Task struct {
	ID      string
	Pending *schedule.Item
	Run     *leasecrontype.Run
	// Payload is the pending task's payload, loaded from its blob when it
	// is large (at most PayloadPreview bytes are shown).
	Payload string
	// Recent are the latest occurrences of a recurring series, newest
	// first.
	Recent []leasecrontype.Run
	// Children are the tasks still waiting for this one.
	Children []string
}

// Batch is what the batch page shows: its progress and its members (at
// most BatchMembersShown, with how each ended).
type Batch struct {
	Status  leasecron.BatchStatus
	Members []leasecron.BatchMember
	// Callback is the state of the completion callback ("" without one).
	Callback string
}

// RunQuery selects run records.
type RunQuery struct {
	State    leasecrontype.RunState
	Type     string
	Series   string
	Batch    string
	Limit    int
	Continue string
}

// RunPage is one page of run records, newest first.
type RunPage struct {
	Runs     []leasecrontype.Run
	Continue string
	// Partial explains a limitation of the records (e.g. a scan capped);
	// empty when the page is exact.
	Partial string
}

// Fleet is what the fleet page shows.
type Fleet struct {
	Leader    trafficcop.HolderInfo
	Instances []Instance
	Limits    []Limit
	// Shards is the shard map of a sharded schedule (nil when unsharded).
	Shards *leasecron.ShardReport
}

// Instance is one worker instance as its presence and its counters row
// show it (leasecron.Instance).
type Instance struct {
	ID      string
	Version string
	// Present: the worker is running (leasecron.Instance.Present); Started
	// and Seen come from its presence.
	Present       bool
	Started, Seen time.Time
	Flushed       time.Time
	Counts        Counts
	// Draining: someone asked it to drain (DrainBy); DrainStarted is when
	// it saw the request (zero until then).
	Draining     bool
	DrainBy      string
	DrainStarted time.Time
	// Roles are what it does (leasecron.RoleLead, …; nil: its release
	// does not say).
	Roles []string
}

package leasecron

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/apitoken"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/pause"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Task is what a handler receives.
type Task = leasecrontype.Task

// Handler runs one task; see leasecrontype.Handler.
type Handler = leasecrontype.Handler

// Item is a scheduled task; see schedule.Item.
type Item = schedule.Item

// Run is a task's run record; see leasecrontype.Run.
type Run = leasecrontype.Run

// RunProgress is a run's last progress report (Run.Progress; see Progress).
type RunProgress = leasecrontype.RunProgress

// RunState is a run's visible state; see leasecrontype.RunState.
type RunState = leasecrontype.RunState

// The states of a run (leasecrontype.RunScheduled, ...): scheduled →
// queued → running → succeeded, or running → failed → running … → dead;
// cancelled from any state that is not finished.
const (
	RunScheduled = leasecrontype.RunScheduled
	RunQueued    = leasecrontype.RunQueued
	RunRunning   = leasecrontype.RunRunning
	RunSucceeded = leasecrontype.RunSucceeded
	RunFailed    = leasecrontype.RunFailed
	RunDead      = leasecrontype.RunDead
	RunCancelled = leasecrontype.RunCancelled
	RunSnoozed   = leasecrontype.RunSnoozed
)

// Storage says how to reach the storage account: a connection string, or
// an account name with Azure AD credentials.
type Storage struct {
	// ConnectionString is a storage connection string with AccountName and
	// AccountKey (or UseDevelopmentStorage=true).
	ConnectionString string
	// Account is the account name used with Credential when
	// ConnectionString is empty.
	Account string
	// BlobURL, QueueURL and TableURL override the endpoints derived from
	// Account.
	BlobURL, QueueURL, TableURL string
	// Credential is the Azure AD credential; nil means
	// azidentity.NewDefaultAzureCredential.
	Credential azcore.TokenCredential
	// Transport, when set, carries every request to the service instead of
	// leasecron's pooled HTTP client: a proxy, a recorder, or an in-process
	// service (the simulator's). Most programs leave it nil.
	Transport policy.Transporter
}

func (s Storage) config(counter *storage.Counter) storage.Config {
	return storage.Config{
		Transport:        s.Transport,
		ConnectionString: s.ConnectionString,
		Account:          s.Account,
		BlobURL:          s.BlobURL,
		QueueURL:         s.QueueURL,
		TableURL:         s.TableURL,
		Credential:       s.Credential,
		Counter:          counter,
	}
}

// Names are the storage resources leasecron uses. Empty fields take the
// defaults shown.
type Names struct {
	// Container holds the lease blob, slots, payload blobs and calendars.
	// Default "leasecron".
	Container string
	// LeaseBlob is the traffic cop's blob. Default "locks/scheduler".
	LeaseBlob string
	// ScheduleTable holds pending tasks. Default "ScheduledItems".
	ScheduleTable string
	// RunsTable holds run records. Default "Runs".
	RunsTable string
	// BlackboardTable holds blackboard keys. Default "Blackboard".
	BlackboardTable string
	// Queue is the work queue. Default "leasecron-work".
	Queue string
	// PoisonQueue holds messages set aside. Default "leasecron-work-poison".
	PoisonQueue string
	// Queues is how many work queues the fleet spreads its messages over:
	// Queue, then Queue-1, Queue-2, … Default 1; at most queue.MaxQueues.
	// One queue carries about 2,000 messages/s on Azure; an idle worker
	// polls one queue at a time, so more queues cost no more when idle
	// (see the README's "Sharding"). It may grow, never shrink: messages
	// in a queue beyond a smaller count would not be drained.
	Queues int
	// Shards is how many shards (table partitions "00", "01", …) the
	// schedule is split into; a task's shard is a hash of its id. Default
	// 1: one shard, moved by the traffic cop. Above 1 the schedule is
	// sharded: every live worker moves a share of the shards, and this is
	// the count until a worker has written the shard map, whose count rules
	// afterwards (Client.SetShards changes it online). Every worker and
	// client of a sharded fleet must set it above 1; at most MaxShards.
	// See the README's "Sharding".
	Shards int
}

// Route is where a task's messages go: a named queue and a priority level
// (see queue.Route; Item.Queue and Item.Priority set it per task,
// Routing.Types per type).
type Route = queue.Route

// Routing says where messages go, the same for every worker and client
// of a fleet (WorkerOptions.Routing, ClientOptions.Routing).
type Routing struct {
	// Types sends a task type's messages to a named queue and priority
	// (types.<type>.queue and .priority) when a task names neither.
	Types map[string]Route
	// FairLanes is how many fairness lanes the tasks with a fair key
	// (Item.FairKey) of one queue and priority are spread over, by a hash
	// of the key (fairness.lanes): while several lanes have tasks waiting,
	// workers take from them in turn. Default queue.DefaultFairLanes (8);
	// at most queue.MaxFairLanes.
	FairLanes int
	// FairWeights gives keys a weight (fairness.weights): each key listed
	// has a lane of its own, taken from in proportion to its weight
	// against the others' (1 each). At most FairLanes-1 keys.
	FairWeights map[string]int
	// FairKeys takes a task type's fair key from its payload when a task
	// names none (types.<type>.fair_key): "payload.<field>", a top-level
	// field of its JSON payload (a string, or a number's digits). A task
	// without the field, or whose payload is kept in a blob, has no fair
	// key.
	FairKeys map[string]string
}

func (r Routing) validate(field string) error {
	if err := validateRoutes(field, r.Types); err != nil {
		return err
	}
	for typ, k := range r.FairKeys {
		if f, ok := strings.CutPrefix(k, "payload."); !ok || f == "" {
			return opt.Invalid(ErrInvalidOptions, fmt.Sprintf("%s.Routing.FairKeys[%q]", field, typ), k, `"payload.<field>", a top-level field of the JSON payload`)
		}
	}
	if r.FairLanes < 0 {
		return opt.Invalid(ErrInvalidOptions, field+".Routing.FairLanes", r.FairLanes, fmt.Sprintf("1 to %d, or 0 for the default %d", queue.MaxFairLanes, queue.DefaultFairLanes))
	}
	return nil
}

// client returns the queue client options of r.
func (r Routing) client(o queue.ClientOptions) queue.ClientOptions {
	o.Routes, o.FairLanes, o.FairWeights = r.Types, r.FairLanes, r.FairWeights
	o.FairKeyFields = nil
	for typ, k := range r.FairKeys {
		if o.FairKeyFields == nil {
			o.FairKeyFields = map[string]string{}
		}
		o.FairKeyFields[typ] = strings.TrimPrefix(k, "payload.")
	}
	return o
}

// Priority levels of Item.Priority and Route.Priority: a worker starts a
// task of a higher level it can run before any of a lower one. 0 means
// PriorityDefault.
const (
	PriorityCritical = queue.PriorityCritical
	PriorityHigh     = queue.PriorityHigh
	PriorityDefault  = queue.PriorityDefault
	PriorityLow      = queue.PriorityLow
)

// validateRoutes checks the Routes option of an options type named field.
func validateRoutes(field string, routes map[string]Route) error {
	for typ, r := range routes {
		if err := schedule.ValidateType(typ); err != nil {
			return fmt.Errorf("%w: %s.Routing.Types: %w", ErrInvalidOptions, field, err)
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%w: %s.Routing.Types[%q]: %w", ErrInvalidOptions, field, typ, err)
		}
	}
	return nil
}

// MaxShards is the largest Names.Shards.
const MaxShards = 256

// DefaultNames returns the default resource names.
func DefaultNames() Names {
	return Names{
		Container:       payload.DefaultContainer,
		LeaseBlob:       "locks/scheduler",
		ScheduleTable:   schedule.DefaultTable,
		RunsTable:       runs.DefaultTable,
		BlackboardTable: blackboard.DefaultTable,
		Queue:           queue.DefaultQueue,
		PoisonQueue:     queue.DefaultPoisonQueue,
		Shards:          1,
		Queues:          1,
	}
}

// WithDefaults returns n with every empty name set to its default.
func (n Names) WithDefaults() Names {
	d := DefaultNames()
	n.Container = cmp.Or(n.Container, d.Container)
	n.LeaseBlob = cmp.Or(n.LeaseBlob, d.LeaseBlob)
	n.ScheduleTable = cmp.Or(n.ScheduleTable, d.ScheduleTable)
	n.RunsTable = cmp.Or(n.RunsTable, d.RunsTable)
	n.BlackboardTable = cmp.Or(n.BlackboardTable, d.BlackboardTable)
	n.Queue = cmp.Or(n.Queue, d.Queue)
	n.PoisonQueue = cmp.Or(n.PoisonQueue, d.PoisonQueue)
	n.Shards = cmp.Or(n.Shards, d.Shards)
	n.Queues = cmp.Or(n.Queues, d.Queues)
	return n
}

func (n Names) validate() error {
	for _, c := range []struct {
		field, val string
		check      func(string) error
	}{
		{"Names.Container", n.Container, storage.ValidateContainerName},
		{"Names.ScheduleTable", n.ScheduleTable, storage.ValidateTableName},
		{"Names.RunsTable", n.RunsTable, storage.ValidateTableName},
		{"Names.BlackboardTable", n.BlackboardTable, storage.ValidateTableName},
		{"Names.Queue", n.Queue, storage.ValidateQueueName},
		{"Names.PoisonQueue", n.PoisonQueue, storage.ValidateQueueName},
	} {
		if err := c.check(c.val); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, c.field, err)
		}
	}
	if n.Queues < 1 || n.Queues > queue.MaxQueues {
		return opt.Invalid(ErrInvalidOptions, "Names.Queues", n.Queues, fmt.Sprintf("1 to %d work queues", queue.MaxQueues))
	}
	if err := queue.ValidateFamily(n.Queue, n.PoisonQueue, n.Queues, "Names"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if n.Shards < 1 || n.Shards > MaxShards {
		return opt.Invalid(ErrInvalidOptions, "Names.Shards", n.Shards, fmt.Sprintf("1 to %d shards", MaxShards))
	}
	if n.Queue == n.PoisonQueue {
		return fmt.Errorf("%w: Names.PoisonQueue = %q: want a queue other than Names.Queue", ErrInvalidOptions, n.PoisonQueue)
	}
	return nil
}

// parts are the storage-backed pieces a Client and a Worker both use.
type parts struct {
	sc       *storage.Clients
	payloads *payload.BlobStore
	sched    *schedule.Client
	queue    *queue.Client
	runs     *runs.Store // nil when run records are off
	lease    trafficcop.Lock
	pauses   *pause.Store
	tokens   *apitoken.Store
	shardMap table.Table // the schedule table, where the shard map lives
	// runLayout is the run records' layout as the shard map says (nil
	// without run records).
	runLayout *runLayout
}

// version is written on the counters rows (the worker's version; empty for
// a client, which flushes none).
func newParts(sc *storage.Clients, n Names, routing Routing, noRuns bool, ro RunsOptions, maxPayload int, version string, clk clock.Clock, log *slog.Logger) (parts, error) {
	p := parts{sc: sc}
	var err error
	if p.lease, err = trafficcop.NewBlobLock(sc.Blob.NewContainerClient(n.Container), n.LeaseBlob); err != nil {
		return p, fmt.Errorf("Names.LeaseBlob: %w", err)
	}
	if p.payloads, err = payload.NewBlobStore(sc.Blob, payload.Options{Container: n.Container, Logger: log}); err != nil {
		return p, err
	}
	if p.shardMap, err = table.NewAzure(sc.Table, n.ScheduleTable); err != nil {
		return p, err
	}
	if !noRuns {
		o := runs.Options{Table: n.RunsTable, Retention: ro.Retention, RetentionFailed: ro.RetentionFailed, AuditRetention: ro.AuditRetention, Version: version, Clock: clk, Logger: log}
		// Every process reads the layout from the shard map, sharded or
		// not: one still on one shard in the middle of the rolling switch
		// to sharding must find the records a sharded one writes.
		rt, err := table.NewAzure(sc.Table, n.RunsTable)
		if err != nil {
			return p, err
		}
		p.runLayout = newRunLayout(p.shardMap, rt, n, clk, log)
		o.Layout, o.Refresh = p.runLayout.get, p.runLayout.refresh
		o.Prepare = func(ctx context.Context) error { return p.runLayout.size(ctx, false) }
		if p.runs, err = runs.New(sc, o); err != nil {
			return p, err
		}
	}
	so := schedule.Options{
		Shards: shard.Names(n.Shards),
		// Every process places and looks up tasks by the shard map once a
		// sharded worker has written it, sharded or not (issue 38, seed
		// 1356): in the middle of the rolling switch to sharding, a client
		// still on one shard placed its tasks in "00" and looked only
		// there, so it could not find what sharded clients had scheduled
		// and took a unique key they held. Until there is a map, the
		// count is names.shards.
		ShardMap: true,
		Table:    n.ScheduleTable, Clock: clk, Logger: log, PayloadStore: p.payloads, MaxPayload: maxPayload,
		// Workers with run records check early-sent messages (see early.go).
		ChangesAfterSend: !noRuns,
	}
	if p.runs != nil {
		so.Unconfirm = p.runs.Unconfirm // of a task a client sent for now (sendnow.go)
		so.UnconfirmDue = func(ctx context.Context, old schedule.Item) (string, error) {
			return p.runs.UnconfirmDue(ctx, old.ID, runs.Meta{Type: old.Type, Due: old.Due, Batch: old.Batch})
		}
		so.ConfirmAgain = func(ctx context.Context, old schedule.Item, token string) error {
			return p.runs.ConfirmAgain(ctx, old.ID, runs.Meta{Type: old.Type, Due: old.Due, Batch: old.Batch, Token: token})
		}
		so.SentStarted = p.runs.SentStarted
	}
	if p.sched, err = schedule.NewAzure(sc.Table, so); err != nil {
		return p, err
	}
	if p.queue, err = queue.NewClient(sc.Queue, routing.client(queue.ClientOptions{Queue: n.Queue, PoisonQueue: n.PoisonQueue, Queues: n.Queues, Clock: clk, Logger: log})); err != nil {
		return p, err
	}
	if p.pauses, err = pause.New(sc.Blob.NewContainerClient(n.Container), pause.DefaultBlob, clk); err != nil {
		return p, err
	}
	p.tokens = apitoken.New(sc.Blob.NewContainerClient(n.Container), clk)
	return p, nil
}

// Package results holds the JSON records the benchmark runner writes
// (`go run ./bench -out DIR`) and the report renderer reads
// (`go run ./bench/report -in DIR -out docs`), plus the small
// statistics both share. Durations are stored as float64 seconds so the
// files stay readable.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// File names of the records in a results directory.
const (
	MachineFile      = "machine.json"
	MoverFile        = "mover.json"
	ConsumerFile     = "consumer.json"
	LatenessFile     = "lateness.json"
	FailoverFile     = "failover.json"
	TransactionsFile = "transactions.json"
	IdleFile         = "idle.json"
	FootprintFile    = "footprint.json"
	HistoryFile      = "history.json"
	BatchFile        = "batch.json"
	RateFile         = "rate.json"
	ShardsFile       = "shards.json"
	APIFile          = "api.json"
	CapacityFile     = "capacity.json"
	// AccountFile is a Consumer record of worker-process pairs against a
	// storage account.
	AccountFile = "account.json"
)

// Machine describes where and when the benchmarks ran.
type Machine struct {
	Cores          int       `json:"cores"`
	CPUModel       string    `json:"cpu_model"`
	MemoryMiB      int       `json:"memory_mib"`
	GoVersion      string    `json:"go_version"`
	AzuriteVersion string    `json:"azurite_version"`
	OS             string    `json:"os"`
	Kernel         string    `json:"kernel"`
	Commit         string    `json:"commit"`
	Quick          bool      `json:"quick"`
	Started        time.Time `json:"started"`
	Finished       time.Time `json:"finished"`
	// LoadStart and LoadEnd are /proc/loadavg at the start and the end:
	// the machine may be shared with other work.
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
	// Scenarios lists the scenarios run, in order, with their wall time.
	Scenarios []ScenarioTime `json:"scenarios"`
	// Rerun names the scenarios of a later partial run (-only) whose
	// records replaced the first run's.
	Rerun []string `json:"rerun,omitempty"`
}

// ScenarioTime is one scenario's wall time, or its error.
type ScenarioTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// Rate is one throughput measurement.
type Rate struct {
	// N is how many items were processed.
	N int `json:"n"`
	// Seconds is the wall time from the first request to the last
	// completion.
	Seconds float64 `json:"seconds"`
	// PerSec is N / Seconds.
	PerSec float64 `json:"per_sec"`
	// Progress samples (seconds since start, items done) for plots.
	Progress []Point `json:"progress,omitempty"`
	// ClientCPU is the CPU time (user+system, seconds) the benchmark
	// process used meanwhile; ServerCPU Azurite's.
	ClientCPU float64 `json:"client_cpu,omitempty"`
	ServerCPU float64 `json:"server_cpu,omitempty"`
}

// NewRate builds a Rate from a count and a wall time.
func NewRate(n int, d time.Duration, progress []Point) Rate {
	r := Rate{N: n, Seconds: d.Seconds(), Progress: progress}
	if d > 0 {
		r.PerSec = float64(n) / d.Seconds()
	}
	return r
}

// Point is an (x, y) sample.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Mover is scenario 1: the mover against the raw enqueue ceiling and the
// naive design.
type Mover struct {
	// Concurrency is the mover's enqueue concurrency and the raw
	// ceiling's goroutine count.
	Concurrency int `json:"concurrency"`
	// Sets are the measurements: on Azurite as it is, and with latency
	// added to every request (a cloud round trip).
	Sets []MoverSet `json:"sets"`
	// MoverRequests counts the mover's storage requests in its last
	// repetition without added latency, by "service op".
	MoverRequests map[string]int64 `json:"mover_requests,omitempty"`
}

// MoverSet is one set of mover measurements.
type MoverSet struct {
	// AddedLatencyMS is the delay added before every storage request.
	AddedLatencyMS float64 `json:"added_latency_ms"`
	// Rows is how many due rows the mover and the raw ceiling move.
	Rows int `json:"rows"`
	// NaiveRows is the subset the naive design moves (of a table holding
	// Rows rows).
	NaiveRows int `json:"naive_rows"`
	// Raw, Mover and Naive hold one Rate per repetition, each on a fresh
	// Azurite; repetition i of each ran back to back.
	Raw   []Rate `json:"raw"`
	Mover []Rate `json:"mover"`
	Naive []Rate `json:"naive"`
	// MoverTableSeconds is, per repetition, the time the mover spent in
	// table calls (queries, batches, fence reads). It makes them one at a
	// time between enqueue phases, so no enqueue is in flight meanwhile.
	MoverTableSeconds []float64 `json:"mover_table_seconds,omitempty"`
}

// Consumer is scenario 2: consumer throughput against raw dequeue+delete.
type Consumer struct {
	// Messages is how many messages each measurement drains.
	Messages int `json:"messages"`
	// Rows are the measurements.
	Rows []ConsumerRow `json:"rows"`
	// TableCosts are Azurite's CPU for table transactions of a few sizes.
	TableCosts []TableCost `json:"table_costs,omitempty"`
}

// TableCost is Azurite's CPU for Requests table requests of
// EntitiesPerRequest inserts each (one insert request when 1, else a
// transaction).
type TableCost struct {
	EntitiesPerRequest int     `json:"entities_per_request"`
	Requests           int     `json:"requests"`
	AzuriteCPUSeconds  float64 `json:"azurite_cpu_seconds"`
}

// PerRequestMs is Azurite's CPU per request, in milliseconds.
func (c TableCost) PerRequestMs() float64 {
	if c.Requests == 0 {
		return 0
	}
	return c.AzuriteCPUSeconds * 1000 / float64(c.Requests)
}

// PerEntityMs is Azurite's CPU per entity, in milliseconds.
func (c TableCost) PerEntityMs() float64 {
	if c.EntitiesPerRequest == 0 {
		return 0
	}
	return c.PerRequestMs() / float64(c.EntitiesPerRequest)
}

// Consumer variants.
const (
	VariantRaw       = "raw"       // plain SDK: dequeue(32) + concurrent deletes
	VariantInProcess = "inprocess" // queue.Consumer instances, no-op Go handler
	VariantProcess   = "process"   // worker processes of the built binary
	VariantRawDeep   = "raw-deep"  // VariantRaw on a longer queue
)

// ConsumerRow is one consumer throughput measurement.
type ConsumerRow struct {
	Variant string `json:"variant"`
	// Label describes the configuration.
	Label string `json:"label"`
	// Instances is the number of consumers (goroutine loops or processes).
	Instances int `json:"instances"`
	// Concurrency is the handler concurrency of each instance.
	Concurrency int `json:"concurrency"`
	// Runs reports whether run records were kept.
	Runs bool `json:"runs"`
	// Messages overrides Consumer.Messages for this row when not 0.
	Messages int  `json:"messages,omitempty"`
	Rate     Rate `json:"rate"`
	// Steady is the rate between 10 % and 90 % of the messages done
	// (leaves out start-up and the tail).
	Steady float64 `json:"steady_per_sec"`
	// CPUSeconds is the user+system CPU the worker processes used
	// (process variant only).
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// AzuriteCPUSeconds is the CPU Azurite used while the processes
	// drained the queue (process variant only).
	AzuriteCPUSeconds float64 `json:"azurite_cpu_seconds,omitempty"`
	// LatencyMs is the delay a proxy added to every storage request of the
	// processes (0: none).
	LatencyMs int `json:"latency_ms,omitempty"`
	// Rep numbers repeated measurements of the same configuration (from 0).
	Rep int `json:"rep,omitempty"`
	// Requests are the storage requests made, by "service op" (raw and
	// in-process variants).
	Requests map[string]int64 `json:"requests,omitempty"`
}

// AzuriteBusy is the share of the drain's wall time that Azurite spent on
// the CPU (0 when not measured): near 1, its single thread was the
// bottleneck and the rate says what its CPU per task is rather than what
// the workers could do.
func (r ConsumerRow) AzuriteBusy() float64 {
	if r.Rate.Seconds <= 0 {
		return 0
	}
	return r.AzuriteCPUSeconds / r.Rate.Seconds
}

// Lateness is scenario 3: on-time delivery.
type Lateness struct {
	Runs []LatenessRun `json:"runs"`
}

// LatenessRun is one on-time delivery run.
type LatenessRun struct {
	// Label names the configuration ("early enqueue on").
	Label string `json:"label"`
	// Early is the mover.early setting ("0s" = the default, one failover:
	// lease duration + lease poll; "-1s" disables).
	Early string `json:"early"`
	// Workers is the number of worker processes; Leader the one leading.
	Workers int    `json:"workers"`
	Leader  string `json:"leader"`
	// Tasks were spread uniformly over WindowSeconds.
	Tasks         int     `json:"tasks"`
	WindowSeconds float64 `json:"window_seconds"`
	// Ran counts tasks that ran; Duplicates counts executions beyond the
	// first.
	Ran        int `json:"ran"`
	Duplicates int `json:"duplicates"`
	// PerWorker counts the tasks each worker ran first.
	PerWorker map[string]int `json:"per_worker,omitempty"`
	// Config are the interval settings that matter.
	Config map[string]string `json:"config"`
	// Kill describes the leader SIGKILL of the run ("" = none) and
	// TakeoverSeconds how long after it the next leader took over.
	Kill            string  `json:"kill,omitempty"`
	TakeoverSeconds float64 `json:"takeover_seconds,omitempty"`
	// Lateness is handler start − due per task, seconds (first execution).
	Lateness []float64 `json:"lateness"`
	Summary  Summary   `json:"summary"`
}

// Failover is scenario 4: leader loss to first move by the new leader.
type Failover struct {
	// PollEverySeconds is lease.poll_every of the standbys.
	PollEverySeconds float64          `json:"poll_every_seconds"`
	Samples          []FailoverSample `json:"samples"`
}

// FailoverSample is one leader loss.
type FailoverSample struct {
	LeaseSeconds float64 `json:"lease_seconds"`
	Signal       string  `json:"signal"` // SIGTERM or SIGKILL
	Rep          int     `json:"rep"`
	// Takeover is signal → the marker task (due at the signal) moved by
	// the new leader, seconds.
	Takeover float64 `json:"takeover_seconds"`
	// Acquired is signal → the lease blob names the new holder, seconds.
	Acquired float64 `json:"acquired_seconds"`
	// OldGeneration and NewGeneration are the fencing generations; the
	// marker's run record carries NewGeneration.
	OldGeneration int64  `json:"old_generation"`
	NewGeneration int64  `json:"new_generation"`
	OldLeader     string `json:"old_leader"`
	NewLeader     string `json:"new_leader"`
	// Error is set when the sample failed (it is then not counted).
	Error string `json:"error,omitempty"`
}

// Transactions is scenario 5, part one: storage transactions per task.
type Transactions struct {
	Cases []TxCase `json:"cases"`
}

// TxCase is the marginal cost of tasks in one pattern.
type TxCase struct {
	// Kind is "one-off" or "recurring".
	Kind string `json:"kind"`
	// Pattern is "lone" (one task at a time into an idle leader) or
	// "burst" (many due at once).
	Pattern string `json:"pattern"`
	// Runs reports whether run records were kept.
	Runs bool `json:"runs"`
	// Tasks is how many tasks (or occurrences) the averages are over.
	Tasks int `json:"tasks"`
	// WindowSeconds is how long the worker was observed.
	WindowSeconds float64 `json:"window_seconds"`
	// SpacingSeconds is the gap between lone tasks (or the recurrence).
	SpacingSeconds float64 `json:"spacing_seconds,omitempty"`
	// Messages is how many messages the worker and the client enqueued in
	// the window, and Deleted how many the worker deleted: every message
	// is deleted once, its task run or (an occurrence moved just before
	// its series was cancelled) found cancelled.
	Messages int `json:"messages,omitempty"`
	Deleted  int `json:"deleted,omitempty"`
	// Client is the scheduling side's requests per task, by "service op";
	// for recurring kinds, per series (paid once, not per occurrence).
	Client map[string]float64 `json:"client"`
	// Worker is the worker's marginal requests per task, by "service op":
	// requests during the window minus the idle rate × the window.
	Worker map[string]float64 `json:"worker"`
	// ClientTotal, WorkerTotal and Total sum them.
	ClientTotal float64 `json:"client_total"`
	WorkerTotal float64 `json:"worker_total"`
	Total       float64 `json:"total"`
}

// Idle is scenario 5, part two: requests per hour of idle workers.
type Idle struct {
	// WarmupSeconds passed before counting; WindowSeconds were counted.
	WarmupSeconds float64   `json:"warmup_seconds"`
	WindowSeconds float64   `json:"window_seconds"`
	Rows          []IdleRow `json:"rows"`
}

// IdleRow is one idle role.
type IdleRow struct {
	// Role is "leader", "standby", "standby-noruns", "consumer-only" or
	// "leader-nolisten" (a leader with worker.listen_every negative).
	Role string `json:"role"`
	// Label describes it.
	Label string `json:"label"`
	// Runs reports whether run records were kept.
	Runs bool `json:"runs"`
	// Requests counted in the window, by "service op".
	Requests map[string]int64 `json:"requests"`
	// PerHour is the total extrapolated to one hour.
	PerHour float64 `json:"per_hour"`
}

// Footprint is scenario 6: a worker process's memory and CPU.
type Footprint struct {
	Tasks int `json:"tasks"`
	// Concurrency is worker.concurrency; Runs whether run records were
	// kept.
	Concurrency int  `json:"concurrency"`
	Runs        bool `json:"runs"`
	// PickupSeconds is how long after the messages became visible the
	// idle worker was first seen to have finished one (its polling had
	// backed off); Seconds is the drain time from then to an empty queue.
	PickupSeconds float64 `json:"pickup_seconds"`
	Seconds       float64 `json:"seconds"`
	TasksPerSec   float64 `json:"tasks_per_sec"`
	// RSSIdleMiB is VmRSS before the messages became visible; RSSPeakMiB
	// is VmHWM at the end; RSSEndMiB VmRSS at the end.
	RSSIdleMiB float64 `json:"rss_idle_mib"`
	RSSPeakMiB float64 `json:"rss_peak_mib"`
	RSSEndMiB  float64 `json:"rss_end_mib"`
	// CPUSeconds is utime+stime spent draining; CPUPer1000 per 1,000
	// tasks; CPUIdleSeconds what the process used before.
	CPUSeconds     float64 `json:"cpu_seconds"`
	CPUPer1000     float64 `json:"cpu_per_1000"`
	CPUIdleSeconds float64 `json:"cpu_idle_seconds"`
	// Samples over time: X seconds since the messages became visible.
	RSS  []Point `json:"rss_mib"`
	Done []Point `json:"done"`
}

// Batch is the batch-scheduling scenario: Client.ScheduleMany's table
// transactions against one Schedule call per task, on the same Azurite.
type Batch struct {
	Cases []BatchCase `json:"cases"`
}

// BatchCase is one way of scheduling Tasks tasks.
type BatchCase struct {
	// Method is "batch" (ScheduleMany), "single" (one Schedule call after
	// the other) or "single-16" (16 callers at once).
	Method string `json:"method"`
	// AddedLatencyMS is the delay added before every request (0: Azurite
	// as is).
	AddedLatencyMS float64 `json:"added_latency_ms,omitempty"`
	// Tasks is how many tasks were scheduled.
	Tasks int `json:"tasks"`
	// Rate is the throughput (tasks per second).
	Rate Rate `json:"rate"`
	// Requests is every storage request made, by "service op"; PerTask
	// their sum per task.
	Requests map[string]int64 `json:"requests"`
	PerTask  float64          `json:"per_task"`
}

// Capacity is the capacity scenario (issue 41): a backlog drained by 1, 2
// and 4 instances through a proxy enforcing Azure's targets in Azure's
// ratio, scaled down (QueueRate message requests/s per queue,
// PartitionRate entity operations/s per table partition, AccountRate
// requests/s per service, LatencyMS added to each request).
type Capacity struct {
	QueueRate     float64        `json:"queue_rate"`
	PartitionRate float64        `json:"partition_rate"`
	AccountRate   float64        `json:"account_rate"`
	LatencyMS     float64        `json:"latency_ms"`
	Concurrency   int            `json:"concurrency"`
	Shards        int            `json:"shards"`
	Queues        int            `json:"queues"`
	Tasks         int            `json:"tasks"`
	Cases         []CapacityCase `json:"cases"`
	// Shared is the same drain with instances that each carry a fixed
	// share: SharedConcurrency handlers of SharedWorkMS each, so that one
	// instance cannot reach the layout's limit alone and what more
	// instances add shows (absent in records before 2026-11-30).
	SharedConcurrency int            `json:"shared_concurrency,omitempty"`
	SharedWorkMS      float64        `json:"shared_work_ms,omitempty"`
	Shared            []CapacityCase `json:"shared,omitempty"`
}

// CapacityCase is one instance count: its throughput, what the proxy
// counted per task, the layout's physical limit (the rate at which the
// first queue, partition or account target would be reached at those
// counts per task), LimitBy (that bucket) and OfLimit (throughput ÷
// limit).
type CapacityCase struct {
	Instances int     `json:"instances"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// SteadyPerSecond is the rate between a tenth and nine tenths of the
	// tasks handled: without the fleet's start-up (absent in records
	// before 2026-11-30).
	SteadyPerSecond  float64 `json:"steady_per_second,omitempty"`
	Requests         int64   `json:"requests"`
	Refused          int64   `json:"refused"`
	QueueRefused     int64   `json:"queue_refused"`
	PartitionRefused int64   `json:"partition_refused"`
	AccountRefused   int64   `json:"account_refused"`
	PerTask          struct {
		Requests         float64 `json:"requests"`
		RunsEntities     float64 `json:"runs_entities"`
		ScheduleEntities float64 `json:"schedule_entities"`
		OtherEntities    float64 `json:"other_entities"`
		QueueMessages    float64 `json:"queue_messages"`
	} `json:"per_task"`
	Limit   float64          `json:"limit"`
	LimitBy string           `json:"limit_by"`
	OfLimit float64          `json:"of_limit"`
	Buckets []CapacityBucket `json:"buckets"`
}

// CapacityBucket is one queue or partition: its operations per task and
// the refusals past its target.
type CapacityBucket struct {
	Key     string  `json:"key"`
	Kind    string  `json:"kind"`
	PerTask float64 `json:"per_task"`
	Refused int64   `json:"refused"`
}

// API is the HTTP API scenario: Tasks scheduled by `schedule --file`, by
// the Go client's ScheduleMany and through POST /api/v1/tasks:many, and
// single schedules through the Go client and the API.
type API struct {
	Tasks int `json:"tasks"`
	// Chunk is the tasks per schedule-many request, Conc the requests in
	// flight.
	Chunk   int  `json:"chunk"`
	Conc    int  `json:"conc"`
	File    Rate `json:"file"`
	GoMany  Rate `json:"go_many"`
	APIMany Rate `json:"api_many"`
	// Ratio is APIMany's tasks/s over File's.
	Ratio float64 `json:"ratio"`
	// GoPerTask and APIPerTask are the storage requests per task of
	// ScheduleMany and of the API's client (audit entry included).
	GoPerTask  float64   `json:"go_per_task"`
	APIPerTask float64   `json:"api_per_task"`
	Single     APISingle `json:"single"`
}

// APISingle is N single schedules one after the other, through the Go
// client and through the API, interleaved on one idle account.
type APISingle struct {
	N          int     `json:"n"`
	GoP50MS    float64 `json:"go_p50_ms"`
	GoP99MS    float64 `json:"go_p99_ms"`
	APIP50MS   float64 `json:"api_p50_ms"`
	APIP99MS   float64 `json:"api_p99_ms"`
	GoPerTask  float64 `json:"go_per_task"`
	APIPerTask float64 `json:"api_per_task"`
}

// Summary are order statistics of a sample, in the sample's unit.
type Summary struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Summarize returns the order statistics of xs (nearest-rank percentiles).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Summary{N: len(s), Min: s[0], P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99), Max: s[len(s)-1]}
}

// Percentile returns the p-th percentile (0–100, nearest rank) of sorted
// xs; 0 for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

// Median returns the median of xs (the mean of the middle two for an even
// count); 0 for an empty slice.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianRate returns the median PerSec of rs.
func MedianRate(rs []Rate) float64 {
	xs := make([]float64, 0, len(rs))
	for _, r := range rs {
		xs = append(xs, r.PerSec)
	}
	return Median(xs)
}

// SteadyRate returns the rate between the times the 10 % and the 90 %
// marks of total were reached, from progress samples (X seconds, Y items
// done, Y non-decreasing). It falls back to the overall rate when the
// samples are too coarse.
func SteadyRate(progress []Point, total int) float64 {
	if total <= 0 || len(progress) == 0 {
		return 0
	}
	lo, hi := 0.1*float64(total), 0.9*float64(total)
	var tlo, thi float64 = -1, -1
	var ylo, yhi float64
	for _, p := range progress {
		if tlo < 0 && p.Y >= lo {
			tlo, ylo = p.X, p.Y
		}
		if thi < 0 && p.Y >= hi {
			thi, yhi = p.X, p.Y
		}
	}
	if tlo >= 0 && thi > tlo && yhi > ylo {
		return (yhi - ylo) / (thi - tlo)
	}
	last := progress[len(progress)-1]
	if last.X <= 0 {
		return 0
	}
	return last.Y / last.X
}

// Write stores v as indented JSON in dir/name.
func Write(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("results: encode %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

// ErrMissing is returned by Read when the record does not exist (the
// scenario was not run or failed).
var ErrMissing = errors.New("results: record missing")

// Read loads dir/name into v; ErrMissing when the file does not exist.
func Read(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrMissing, name)
	}
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("results: decode %s: %w", name, err)
	}
	return nil
}

// History is the run-history scenario: what listings, a lookup and the
// cleaner cost on a table of many run records.
type History struct {
	// Runs is how many run records the table held.
	Runs int `json:"runs"`
	// SeedSeconds is how long writing them took.
	SeedSeconds float64 `json:"seed_seconds"`
	// Queries are the listings and the lookup, with their requests.
	Queries []HistoryQuery `json:"queries"`
	// Expired is how many records the cleaner removed, Requests what it
	// cost, Seconds how long it took.
	Expired         int              `json:"expired"`
	CleanRequests   int64            `json:"clean_requests"`
	CleanSeconds    float64          `json:"clean_seconds"`
	CleanByOp       map[string]int64 `json:"clean_by_op"`
	RetentionDays   float64          `json:"retention_days"`
	FailedRetention float64          `json:"failed_retention_days"`
}

// HistoryQuery is one listing (or lookup) of the run-history scenario.
type HistoryQuery struct {
	What     string `json:"what"`
	Rows     int    `json:"rows"`
	Requests int64  `json:"requests"`
	// Right reports that it returned the expected runs in the expected
	// order.
	Right bool `json:"right"`
}

// RateLimit is the rate-limit scenario: the same backlog run by the same
// workers without and with a rate limit on its type, every worker request
// counted.
type RateLimit struct {
	Workers int        `json:"workers"`
	Cases   []RateCase `json:"cases"`
}

// RateCase is one run of the backlog.
type RateCase struct {
	// Limit is "" for the unlimited baseline, else COUNT/WINDOW.
	Limit string `json:"limit"`
	Tasks int    `json:"tasks"`
	// Seconds from scheduling to the last task handled.
	Seconds float64 `json:"seconds"`
	// Requests by "service op", summed over the workers.
	Requests map[string]int64 `json:"requests"`
	PerTask  float64          `json:"per_task"`
	// IdlePerSecond is the workers' request rate before the tasks came;
	// MarginalPerTask is PerTask less that rate over the run.
	IdlePerSecond   float64 `json:"idle_per_second"`
	MarginalPerTask float64 `json:"marginal_per_task"`
	// Deferred is how often a task was put back for want of budget.
	Deferred int64 `json:"deferred"`
}

// Shards is the sharding scenario: tasks drained per second by 1, 2 and 4
// instances through a proxy enforcing scaled-down storage targets, with
// today's single-lease layout and sharded.
type Shards struct {
	// QueueRate and PartitionRate are the proxy's targets: message
	// requests per second per queue, entity operations per second per
	// table partition.
	QueueRate     float64 `json:"queue_rate"`
	PartitionRate float64 `json:"partition_rate"`
	// Concurrency and WorkMillis size each instance: handlers and how
	// long each task takes.
	Concurrency int          `json:"concurrency"`
	WorkMillis  int64        `json:"work_millis"`
	Cases       []ShardsCase `json:"cases"`
}

// ShardsCase is one design at one instance count.
type ShardsCase struct {
	Design    string  `json:"design"`
	Shards    int     `json:"shards"`
	Queues    int     `json:"queues"`
	Instances int     `json:"instances"`
	Tasks     int     `json:"tasks"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Requests through the proxy while draining; Refused answered 503,
	// of them past a queue's and a partition's target.
	Requests         int64 `json:"requests"`
	Refused          int64 `json:"refused"`
	QueueRefused     int64 `json:"queue_refused"`
	PartitionRefused int64 `json:"partition_refused"`
}

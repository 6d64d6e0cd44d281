package ops

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
)

// Task outcomes for Metrics.TaskDone (the outcome label of
// leasecron_tasks_total). Each delivery of a task is counted once, with
// one outcome.
const (
	// OutcomeSucceeded: the handler returned nil and the message was deleted.
	OutcomeSucceeded = "succeeded"
	// OutcomeFailed: the handler failed and no retry decision applies
	// (e.g. the message could not be put back; it will reappear on its own).
	OutcomeFailed = "failed"
	// OutcomeRetried: the handler failed; the message was put back for a
	// later attempt.
	OutcomeRetried = "retried"
	// OutcomeDead: the handler failed for the last allowed time; the
	// message went to the poison queue.
	OutcomeDead = "dead"
	// OutcomeDuplicate: the task had already run (a duplicate delivery)
	// and was not run again.
	OutcomeDuplicate = "duplicate"
	// OutcomeMalformed: the message was not a valid envelope and was set
	// aside.
	OutcomeMalformed = "malformed"
)

// Metrics holds leasecron's Prometheus metrics in a registry of its own.
// All methods are safe for concurrent use and do nothing on a nil receiver.
//
// Label values for task types come from configuration (handler types);
// callers should map a type they have no handler for to "unknown" rather
// than pass arbitrary strings from messages, to keep label cardinality
// bounded.
type Metrics struct {
	reg *prometheus.Registry

	tasks          *prometheus.CounterVec
	taskDuration   *prometheus.HistogramVec
	taskWait       *prometheus.HistogramVec
	taskRun        *prometheus.HistogramVec
	queueDepth     prometheus.Gauge
	dueBacklog     prometheus.Gauge
	dueOldestLag   prometheus.Gauge
	leaseHeld      prometheus.Gauge
	leaseAcquired  prometheus.Counter
	shardsOwned    prometheus.Gauge
	shardLag       *prometheus.GaugeVec
	shardChanges   prometheus.Counter
	leaseLost      prometheus.Counter
	moverBatches   prometheus.Counter
	moverRows      prometheus.Counter
	moverLag       prometheus.Gauge
	storageReqs    *prometheus.CounterVec
	blackboardRuns *prometheus.CounterVec
	slotsHeld      *prometheus.GaugeVec
	buildInfo      *prometheus.GaugeVec
	routeDepth     *prometheus.GaugeVec
	routeWait      *prometheus.GaugeVec
}

// NewMetrics creates the metrics and a registry holding them together with
// the Go runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasecron_tasks_total",
		Help: "Task deliveries handled by this worker, by task type and outcome (succeeded, failed, retried, dead, duplicate, malformed).",
	}, []string{"type", "outcome"})
	m.taskDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasecron_task_duration_seconds",
		Help:    "Time the handler took, by task type.",
		Buckets: prometheus.ExponentialBuckets(0.005, 4, 10), // 5 ms .. ~22 min
	}, []string{"type"})
	m.taskWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasecron_task_wait_seconds",
		Help:    "Queue wait of first attempts, from the task's due time to its handler's start, by task type (the dashboard's latency buckets).",
		Buckets: runs.LatencyBounds[:],
	}, []string{"type"})
	m.taskRun = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasecron_task_run_seconds",
		Help:    "Handler run time of every attempt, by task type (the dashboard's latency buckets).",
		Buckets: runs.LatencyBounds[:],
	}, []string{"type"})
	m.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_queue_depth",
		Help: "Approximate number of messages in the work queue, as last observed.",
	})
	m.dueBacklog = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_due_backlog",
		Help: "Scheduled tasks already due but not yet moved to the queue, as last observed by the mover.",
	})
	m.dueOldestLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_due_oldest_lag_seconds",
		Help: "How long the oldest due-but-unmoved task has been due, as last observed (0 when none).",
	})
	m.leaseHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_lease_held",
		Help: "1 while this instance holds the scheduler lease (is the traffic cop), else 0.",
	})
	m.leaseAcquired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasecron_lease_acquisitions_total",
		Help: "Times this instance acquired the scheduler lease.",
	})
	m.shardsOwned = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_shards_owned",
		Help: "Schedule shards this instance moves now (sharded schedules, names.shards above 1).",
	})
	m.shardLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasecron_shard_mover_lag_seconds",
		Help: "Per shard this instance moves: how late (now - due) the oldest row of its mover's last pass that moved anything was.",
	}, []string{"shard"})
	m.shardChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasecron_shard_ownership_changes_total",
		Help: "Shards the traffic cop gave to another owner while this instance was the cop.",
	})
	m.leaseLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasecron_lease_losses_total",
		Help: "Times this instance lost the scheduler lease without releasing it.",
	})
	m.moverBatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasecron_mover_batches_total",
		Help: "Table transactions committed by the mover.",
	})
	m.moverRows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasecron_mover_rows_moved_total",
		Help: "Scheduled rows moved from the table to the queue.",
	})
	m.moverLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasecron_mover_lag_seconds",
		Help: "Delay between a task's due time and its move to the queue, for the last move.",
	})
	m.storageReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasecron_storage_requests_total",
		Help: "Requests sent to Azure Storage (retries included), by service, operation and HTTP status (0: no response).",
	}, []string{"service", "op", "status"})
	m.blackboardRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasecron_blackboard_runs_total",
		Help: "Blackboard runs by outcome.",
	}, []string{"outcome"})
	m.slotsHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasecron_semaphore_slots_held",
		Help: "Concurrency-limit lease slots this instance holds, by task type.",
	}, []string{"type"})
	m.routeDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasecron_named_queue_depth",
		Help: "Approximate messages of each named queue and priority level (its throughput queues and fairness lanes summed); published by the leader once a minute.",
	}, []string{"queue", "priority"})
	m.routeWait = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasecron_named_queue_oldest_wait_seconds",
		Help: "How long the oldest visible message of each named queue and priority level has waited; published by the leader once a minute.",
	}, []string{"queue", "priority"})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasecron_build_info",
		Help: "Always 1; the version label names the running build.",
	}, []string{"version"})
	for _, c := range []prometheus.Collector{
		m.tasks, m.taskDuration, m.taskWait, m.taskRun, m.queueDepth, m.dueBacklog, m.dueOldestLag,
		m.leaseHeld, m.leaseAcquired, m.leaseLost, m.shardsOwned, m.shardLag, m.shardChanges, m.moverBatches, m.moverRows,
		m.moverLag, m.storageReqs, m.blackboardRuns, m.slotsHeld, m.buildInfo, m.routeDepth, m.routeWait,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		m.reg.MustRegister(c)
	}
	return m
}

// Registry returns the registry holding the metrics (nil for a nil m), so
// a program can add collectors of its own.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the metrics in the Prometheus text exposition format. On
// a nil m it answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// TaskDone counts one delivery of a task of type taskType with the given
// outcome (one of the Outcome constants) and, when d > 0, observes the
// handler's duration.
func (m *Metrics) TaskDone(taskType, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.tasks.WithLabelValues(taskType, outcome).Inc()
	if d > 0 {
		m.taskDuration.WithLabelValues(taskType).Observe(d.Seconds())
	}
}

// TaskTimed observes one attempt's queue wait (when wait >= 0: first
// attempts) and run time.
func (m *Metrics) TaskTimed(taskType string, wait, run time.Duration) {
	if m == nil {
		return
	}
	if wait >= 0 {
		m.taskWait.WithLabelValues(taskType).Observe(wait.Seconds())
	}
	m.taskRun.WithLabelValues(taskType).Observe(run.Seconds())
}

// SetQueueDepth records the work queue's approximate message count.
func (m *Metrics) SetQueueDepth(n int) {
	if m == nil {
		return
	}
	m.queueDepth.Set(float64(n))
}

// SetDueBacklog records how many scheduled tasks are due but not yet moved
// and how long the oldest of them has been due.
func (m *Metrics) SetDueBacklog(n int, oldestLag time.Duration) {
	if m == nil {
		return
	}
	m.dueBacklog.Set(float64(n))
	m.dueOldestLag.Set(max(0, oldestLag.Seconds()))
}

// SetLeaseHeld records whether this instance holds the scheduler lease.
func (m *Metrics) SetLeaseHeld(held bool) {
	if m == nil {
		return
	}
	if held {
		m.leaseHeld.Set(1)
	} else {
		m.leaseHeld.Set(0)
	}
}

// SetShardsOwned records how many schedule shards this instance moves.
func (m *Metrics) SetShardsOwned(n int) {
	if m == nil {
		return
	}
	m.shardsOwned.Set(float64(n))
}

// SetShardLags records the move lag of each shard this instance moves
// and drops the shards it no longer moves.
func (m *Metrics) SetShardLags(lags map[string]time.Duration) {
	if m == nil {
		return
	}
	m.shardLag.Reset()
	for s, d := range lags {
		m.shardLag.WithLabelValues(s).Set(max(0, d.Seconds()))
	}
}

// ShardMoved counts a shard the traffic cop gave to another owner.
func (m *Metrics) ShardMoved() {
	if m == nil {
		return
	}
	m.shardChanges.Inc()
}

// LeaseAcquired counts an acquisition of the scheduler lease.
func (m *Metrics) LeaseAcquired() {
	if m == nil {
		return
	}
	m.leaseAcquired.Inc()
}

// LeaseLost counts a loss of the scheduler lease (not a voluntary release).
func (m *Metrics) LeaseLost() {
	if m == nil {
		return
	}
	m.leaseLost.Inc()
}

// MoverBatch counts one committed mover transaction that moved rows rows.
func (m *Metrics) MoverBatch(rows int) {
	if m == nil {
		return
	}
	m.moverBatches.Inc()
	m.moverRows.Add(float64(max(0, rows)))
}

// SetMoverLag records the delay between a moved task's due time and its
// move.
func (m *Metrics) SetMoverLag(d time.Duration) {
	if m == nil {
		return
	}
	m.moverLag.Set(max(0, d.Seconds()))
}

// StorageRequest counts one storage request. Its signature matches
// storage.Counter.OnRequest:
//
//	counter.OnRequest = metrics.StorageRequest
func (m *Metrics) StorageRequest(k storage.RequestKey) {
	if m == nil {
		return
	}
	m.storageReqs.WithLabelValues(k.Service, k.Op, strconv.Itoa(k.Status)).Inc()
}

// BlackboardRun counts one blackboard run with its outcome (e.g.
// "succeeded", "failed", "takeover").
func (m *Metrics) BlackboardRun(outcome string) {
	if m == nil {
		return
	}
	m.blackboardRuns.WithLabelValues(outcome).Inc()
}

// SetSlotsHeld records how many concurrency-limit slots this instance holds
// for taskType.
func (m *Metrics) SetSlotsHeld(taskType string, n int) {
	if m == nil {
		return
	}
	m.slotsHeld.WithLabelValues(taskType).Set(float64(n))
}

// SetNamedQueue records a named queue's depth and oldest wait at one
// priority level.
func (m *Metrics) SetNamedQueue(queue string, priority int, depth int, oldestWait time.Duration) {
	if m == nil {
		return
	}
	p := strconv.Itoa(priority)
	m.routeDepth.WithLabelValues(queue, p).Set(float64(depth))
	m.routeWait.WithLabelValues(queue, p).Set(oldestWait.Seconds())
}

// SetBuildInfo publishes leasecron_build_info{version} = 1.
func (m *Metrics) SetBuildInfo(version string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version).Set(1)
}

package ops

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
)

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestMetricsExposition(t *testing.T) {
	m := NewMetrics()
	m.TaskDone("echo", OutcomeSucceeded, 30*time.Millisecond)
	m.TaskDone("echo", OutcomeSucceeded, 2*time.Second)
	m.TaskDone("echo", OutcomeRetried, 10*time.Millisecond)
	m.TaskDone("report", OutcomeDead, time.Second)
	m.TaskDone("report", OutcomeDuplicate, 0)
	m.SetQueueDepth(42)
	m.SetDueBacklog(7, 90*time.Second)
	m.SetLeaseHeld(true)
	m.LeaseAcquired()
	m.LeaseAcquired()
	m.LeaseLost()
	m.MoverBatch(100)
	m.MoverBatch(5)
	m.SetMoverLag(1500 * time.Millisecond)
	m.StorageRequest(storage.RequestKey{Service: "queue", Op: "dequeue", Status: 200})
	m.StorageRequest(storage.RequestKey{Service: "queue", Op: "dequeue", Status: 200})
	m.StorageRequest(storage.RequestKey{Service: "blob", Op: "lease-renew", Status: 0})
	m.BlackboardRun("succeeded")
	m.SetSlotsHeld("report", 2)
	m.SetBuildInfo("v1.2.3")
	m.SetShardsOwned(3)
	m.ShardMoved()
	m.SetShardLags(map[string]time.Duration{"03": 2 * time.Second, "05": 0})

	out := scrape(t, m.Handler())
	for _, want := range []string{
		`leasecron_tasks_total{outcome="succeeded",type="echo"} 2`,
		`leasecron_tasks_total{outcome="retried",type="echo"} 1`,
		`leasecron_tasks_total{outcome="dead",type="report"} 1`,
		`leasecron_tasks_total{outcome="duplicate",type="report"} 1`,
		`leasecron_task_duration_seconds_count{type="echo"} 3`,
		`leasecron_task_duration_seconds_count{type="report"} 1`, // the duplicate had no duration
		`leasecron_task_duration_seconds_bucket{type="echo",le="0.02"} 1`,
		`leasecron_queue_depth 42`,
		`leasecron_due_backlog 7`,
		`leasecron_due_oldest_lag_seconds 90`,
		`leasecron_lease_held 1`,
		`leasecron_lease_acquisitions_total 2`,
		`leasecron_lease_losses_total 1`,
		`leasecron_mover_batches_total 2`,
		`leasecron_mover_rows_moved_total 105`,
		`leasecron_mover_lag_seconds 1.5`,
		`leasecron_storage_requests_total{op="dequeue",service="queue",status="200"} 2`,
		`leasecron_storage_requests_total{op="lease-renew",service="blob",status="0"} 1`,
		`leasecron_blackboard_runs_total{outcome="succeeded"} 1`,
		`leasecron_semaphore_slots_held{type="report"} 2`,
		`leasecron_build_info{version="v1.2.3"} 1`,
		`leasecron_shards_owned 3`,
		`leasecron_shard_ownership_changes_total 1`,
		`leasecron_shard_mover_lag_seconds{shard="03"} 2`,
		`leasecron_shard_mover_lag_seconds{shard="05"} 0`,
		`# HELP leasecron_tasks_total `,
		`# TYPE leasecron_task_duration_seconds histogram`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
				t.Errorf("exposition lacks %q", want)
			}
		})
	}

	m.SetLeaseHeld(false)
	m.SetBuildInfo("v1.2.4")
	m.SetShardLags(map[string]time.Duration{"05": time.Second})
	out = scrape(t, m.Handler())
	if strings.Contains(out, `shard="03"`) {
		t.Error("a shard no longer moved keeps its lag gauge")
	}
	for _, want := range []string{"leasecron_lease_held 0\n", `leasecron_build_info{version="v1.2.4"} 1`} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(out, want) {
				t.Errorf("after update, exposition lacks %q", want)
			}
		})
	}
	if strings.Contains(out, `version="v1.2.3"`) {
		t.Error("old build info still exposed")
	}
}

// Separate Metrics do not share a registry (nothing global).
func TestMetricsIndependentRegistries(t *testing.T) {
	a, b := NewMetrics(), NewMetrics()
	a.LeaseAcquired()
	if out := scrape(t, b.Handler()); !strings.Contains(out, "leasecron_lease_acquisitions_total 0\n") {
		t.Fatal("a second Metrics saw the first one's counter")
	}
	if a.Registry() == b.Registry() || a.Registry() == nil {
		t.Fatal("registries shared or nil")
	}
}

func TestMetricsNilReceiverIsANoOp(t *testing.T) {
	var m *Metrics
	m.TaskDone("x", OutcomeFailed, time.Second)
	m.SetQueueDepth(1)
	m.SetDueBacklog(1, time.Second)
	m.SetLeaseHeld(true)
	m.LeaseAcquired()
	m.LeaseLost()
	m.MoverBatch(1)
	m.SetMoverLag(time.Second)
	m.StorageRequest(storage.RequestKey{})
	m.BlackboardRun("x")
	m.SetSlotsHeld("x", 1)
	m.SetBuildInfo("x")
	if m.Registry() != nil {
		t.Fatal("nil Metrics has a registry")
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("nil Metrics handler: status %d, want 404", rec.Code)
	}
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestMetricsAndReadiness: two workers serve the admin endpoints. Their
// counters move as rec and fail tasks are handled, exactly one reports
// holding the lease, /healthz and /readyz answer 200; when Azurite dies
// /readyz turns 503 within seconds and 200 again after it restarts. The
// JSON logs carry the task id, type, attempt and instance of handled tasks.
func TestMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, map[string]any{
		"handlers": map[string]any{"logged": map[string]any{"kind": "log"}},
	})
	addrs := map[string]string{}
	for range 2 {
		addr := freeAddr(t)
		name, err := f.StartWorker("LEASECRON_ADMIN_ADDR=" + addr)
		if err != nil {
			t.Fatal(err)
		}
		addrs[name] = "http://" + addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, base := range addrs {
		if _, err := waitStatus(ctx, base+"/healthz", http.StatusOK, 100*time.Millisecond); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	leader, err := f.WaitLeader(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	scrapeAll := func() map[string]metrics {
		t.Helper()
		out := map[string]metrics{}
		for name, base := range addrs {
			m, err := scrape(ctx, base+"/metrics")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = m
		}
		return out
	}
	total := func(ms map[string]metrics, name string, labels ...string) float64 {
		s := 0.0
		for _, m := range ms {
			v, _ := m.sum(name, labels...)
			s += v
		}
		return s
	}
	before := scrapeAll()

	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	var items []leasecron.Item
	for i := range 5 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("ok%d", i), Type: "rec", Due: time.Now()})
	}
	items = append(items,
		leasecron.Item{ID: "bad0", Type: "fail", Due: time.Now(), MaxAttempts: 2},
		leasecron.Item{ID: "logged0", Type: "logged", Payload: `{"hello":"ops"}`, Due: time.Now()})
	scheduleAll(ctx, t, cl, items)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if missing, err := f.WaitRecords(wctx, ids(items[:5])); err != nil {
		t.Fatalf("rec tasks %v never ran: %v", missing, err)
	}
	// Wait for the counters: the rec tasks succeeded, the fail task used
	// both attempts, the log task succeeded.
	var after map[string]metrics
	for {
		after = scrapeAll()
		okRec := total(after, "leasecron_tasks_total", "type", "rec", "outcome", "succeeded") - total(before, "leasecron_tasks_total", "type", "rec", "outcome", "succeeded")
		fails := total(after, "leasecron_tasks_total", "type", "fail")
		logged := total(after, "leasecron_tasks_total", "type", "logged", "outcome", "succeeded")
		if okRec >= 5 && fails >= 2 && logged >= 1 {
			t.Logf("tasks_total moved: rec succeeded +%.0f, fail outcomes %.0f, logged succeeded %.0f", okRec, fails, logged)
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("counters did not move: rec succeeded +%.0f, fail outcomes %.0f, logged succeeded %.0f", okRec, fails, logged)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for name := range addrs {
		b, _ := before[name].sum("leasecron_storage_requests_total")
		a, _ := after[name].sum("leasecron_storage_requests_total")
		t.Logf("%s: storage requests %.0f -> %.0f", name, b, a)
		if a <= b {
			t.Errorf("%s: storage requests counter did not increase (%.0f -> %.0f)", name, b, a)
		}
	}
	var holders []string
	for name, m := range after {
		v, ok := m.sum("leasecron_lease_held")
		if !ok {
			t.Errorf("%s: no leasecron_lease_held metric", name)
		}
		if v == 1 {
			holders = append(holders, name)
		}
	}
	if len(holders) != 1 || holders[0] != leader.Holder {
		t.Errorf("leasecron_lease_held is 1 on %v, want exactly the leader %s", holders, leader.Holder)
	}

	// Logs: the consumer logs every attempt's outcome with task_id, type,
	// attempt and instance; so does the log handler.
	var failLine, loggedLine map[string]any
	for name := range addrs {
		for _, l := range logLines(t, f, name) {
			if l["task_id"] == "bad0" && l["type"] == "fail" && failLine == nil {
				failLine = l
			}
			if l["task_id"] == "logged0" {
				loggedLine = l
			}
		}
	}
	if failLine == nil {
		t.Error("no log line names the failed task bad0 with its run id and type")
	} else {
		t.Logf("failed-attempt log line: %v", failLine)
		inst, _ := failLine["instance"].(string)
		if _, ok := failLine["attempt"].(float64); !ok || addrs[inst] == "" {
			t.Errorf("failed-attempt log line lacks attempt or a worker's instance id: %v", failLine)
		}
	}
	if loggedLine == nil {
		t.Error("the log handler did not log task logged0")
	} else {
		t.Logf("log-handler line: %v", loggedLine)
		if loggedLine["type"] != "logged" || loggedLine["attempt"] != float64(1) {
			t.Errorf("log-handler line lacks type or attempt: %v", loggedLine)
		}
		if inst, _ := loggedLine["instance"].(string); addrs[inst] == "" {
			t.Errorf("log-handler line lacks the worker's instance id: %v", loggedLine)
		}
	}
	succeededLogged := false
	for name := range addrs {
		for _, l := range logLines(t, f, name) {
			if id, _ := l["task_id"].(string); strings.HasPrefix(id, "ok") && l["msg"] == "task succeeded" {
				_, hasAttempt := l["attempt"].(float64)
				if inst, _ := l["instance"].(string); addrs[inst] != "" && hasAttempt && l["type"] == "rec" {
					succeededLogged = true
				}
			}
		}
	}
	if !succeededLogged {
		t.Error("no info-level 'task succeeded' line with task_id, type, attempt and instance for a rec task")
	}

	// Readiness follows storage.
	for name, base := range addrs {
		if code, body, err := get(ctx, base+"/readyz"); err != nil || code != http.StatusOK {
			t.Fatalf("%s /readyz before the outage: %d %q %v", name, code, body, err)
		}
	}
	// Let Azurite persist what the workers created before it dies.
	time.Sleep(6 * time.Second)
	f.Azurite.Kill()
	octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
	defer ocancel()
	for name, r := range waitAll(octx, addrs, "/readyz", http.StatusServiceUnavailable) {
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		t.Logf("%s /readyz 503 %s after Azurite was killed", name, r.took.Round(time.Millisecond))
		if r.took > 10*time.Second {
			t.Errorf("%s: /readyz took %s to report the outage", name, r.took)
		}
	}
	if code, _, err := get(ctx, addrs[leader.Holder]+"/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz during the outage: %d %v (liveness must not follow storage)", code, err)
	}
	rs := time.Now()
	if err := f.Azurite.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Azurite.Restart took %s (returns once Azurite answers)", time.Since(rs).Round(time.Millisecond))
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	for name, r := range waitAll(rctx, addrs, "/readyz", http.StatusOK) {
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		t.Logf("%s /readyz 200 again %s after Azurite restarted", name, r.took.Round(time.Millisecond))
	}
}

type waited struct {
	took time.Duration
	err  error
}

// waitAll polls path on every worker at once (every 100 ms) until each
// answers want, and reports how long each took.
func waitAll(ctx context.Context, addrs map[string]string, path string, want int) map[string]waited {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]waited{}
	for name, base := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := waitStatus(ctx, base+path, want, 100*time.Millisecond)
			mu.Lock()
			out[name] = waited{d, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

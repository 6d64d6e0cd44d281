package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// driven is what a client driver (tools/e2e/clients) prints: the tasks it
// scheduled that must run, those it cancelled, the --after pairs, its
// batch and its series.
type driven struct {
	Ran       []string    `json:"ran"`
	Cancelled []string    `json:"cancelled"`
	Pairs     [][2]string `json:"pairs"`
	Batch     string      `json:"batch"`
	Series    string      `json:"series"`
	Checks    int         `json:"checks"`
}

// serveAPI starts `leasecron dashboard` of f's account on a free loopback
// port and returns its base URL once the API answers.
func serveAPI(ctx context.Context, t *testing.T, f *fleet.Fleet) string {
	t.Helper()
	addr := freeAddr(t)
	p, err := proc.Start("api", f.Bin, []string{"dashboard", "--addr", addr}, f.Env(), filepath.Join(f.Dir, "api.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	base := "http://" + addr
	for {
		if code, _, err := get(ctx, base+"/api/v1/openapi.json"); err == nil && code == 200 {
			return base
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(f.Dir, "api.log"))
			t.Fatalf("the API never answered: %v\n%s", ctx.Err(), b)
		case <-p.Done():
			b, _ := os.ReadFile(filepath.Join(f.Dir, "api.log"))
			t.Fatalf("leasecron dashboard exited: %v\n%s", p.Err(), b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestClientsAgainstAFleet: the Python and TypeScript clients each
// schedule about 1,000 tasks (one-offs in bulk and one by one, a batch
// with its callback, unique keys, --after pairs, cancels, a bulk cancel
// started twice with its id, a series)
// through the API served by the built binary, against three workers on
// Azurite. The drivers check what the API answers (a duplicate id with
// another body refused, an identical retry answered the same, a held
// unique key naming its holder, status before and after cancel); this
// test then checks through the Go client that every task ran, none
// early, children after their parents, the batch's callback once it
// completed, cancelled tasks never, and the series repeatedly, and that
// status over the API agrees with the CLI's.
func TestClientsAgainstAFleet(t *testing.T) {
	t.Parallel()
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tsClient := filepath.Join(root, "clients", "typescript", "dist", "src", "index.js")
	if _, err := os.Stat(tsClient); err != nil {
		t.Fatalf("the TypeScript client is not built (%v): make deps builds it (cd clients/typescript && npm ci && npm run build)", err)
	}
	f := startFleet(t, 3, map[string]any{
		"handlers": map[string]any{"apijob": map[string]any{"kind": "log"}},
		"worker":   map[string]any{"concurrency": 16},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	base := serveAPI(ctx, t, f)
	token := func(name string, role ...string) string {
		args := []string{"tokens", "create", name, "--role", "scheduler", "--types", "apijob"}
		if len(role) > 0 {
			args = []string{"tokens", "create", name, "--role", role[0]}
		}
		out, stderr, err := f.CLI(ctx, args...)
		if err != nil {
			t.Fatalf("tokens create: %v: %s", err, stderr)
		}
		return strings.TrimSpace(out)
	}
	drivers := map[string]*exec.Cmd{
		"py-": exec.CommandContext(ctx, "/usr/bin/python3", filepath.Join(root, "tools", "e2e", "clients", "drive.py"), base, token("py"), "py-", "apijob", token("py-ops", "operator")),
		"ts-": exec.CommandContext(ctx, "node", filepath.Join(root, "tools", "e2e", "clients", "drive.mjs"), tsClient, base, token("ts"), "ts-", "apijob", token("ts-ops", "operator")),
	}
	drivers["py-"].Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients", "python"))
	var mu sync.Mutex
	results := map[string]driven{}
	var wg sync.WaitGroup
	start := time.Now()
	for prefix, cmd := range drivers {
		wg.Go(func() {
			out, err := cmd.Output()
			var stderr string
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				stderr = string(ee.Stderr)
			}
			var d driven
			if err == nil {
				err = json.Unmarshal(out, &d)
			}
			if err != nil {
				t.Errorf("driver %s: %v\n%s\n%s", prefix, err, out, stderr)
				return
			}
			mu.Lock()
			results[prefix] = d
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("both drivers done in %s: python %d tasks to run (%d checks), typescript %d (%d checks)",
		time.Since(start).Round(time.Millisecond), len(results["py-"].Ran), results["py-"].Checks, len(results["ts-"].Ran), results["ts-"].Checks)

	c, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	viewer := token("checker", leasecron.RoleViewer)
	var want []string
	for _, d := range results {
		want = append(want, d.Ran...)
	}
	// Every task ran and succeeded, none before its due time.
	runs := map[string]leasecron.Run{}
	for {
		clear(runs)
		cont := ""
		for {
			p, err := c.Runs(ctx, leasecron.RunQuery{Type: "apijob", State: leasecron.RunSucceeded, Limit: 1000, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Runs {
				runs[r.ID] = r
			}
			if cont = p.Continue; cont == "" {
				break
			}
		}
		var missing []string
		for _, id := range want {
			if _, ok := runs[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d tasks never succeeded: %v", len(missing), len(want), head(missing, 20))
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d tasks scheduled by the two clients all succeeded %s after the drivers began", len(want), time.Since(start).Round(time.Millisecond))
	for _, id := range want {
		if r := runs[id]; r.Started.Before(r.Due) {
			t.Errorf("%s started %s before its due time", id, r.Due.Sub(r.Started))
		}
	}
	for prefix, d := range results {
		if len(d.Ran) < 1000 {
			t.Errorf("%s scheduled %d tasks to run, want 1,000 or more", prefix, len(d.Ran))
		}
		for _, pc := range d.Pairs {
			if p, ch := runs[pc[0]], runs[pc[1]]; ch.Started.Before(p.Finished) {
				t.Errorf("%s started %s before its parent %s finished", pc[1], p.Finished.Sub(ch.Started), pc[0])
			}
		}
		for _, id := range d.Cancelled {
			st, err := c.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != nil || (st.Run != nil && st.Run.State != leasecron.RunCancelled) {
				t.Errorf("cancelled %s: %s", id, st.State())
			}
		}
		b, err := c.Batch(ctx, d.Batch)
		if err != nil || b.Callback == "" {
			t.Fatalf("batch %s: %+v, %v", d.Batch, b, err)
		}
		waitFor(ctx, t, 2*time.Minute, "the batch's callback "+b.Callback, func() bool {
			st, err := c.Status(ctx, b.Callback)
			return err == nil && st.Run != nil && st.Run.State == leasecron.RunSucceeded
		})
		waitFor(ctx, t, 2*time.Minute, "two runs of the series "+d.Series, func() bool {
			p, err := c.Runs(ctx, leasecron.RunQuery{Series: d.Series, State: leasecron.RunSucceeded, Limit: 10})
			return err == nil && len(p.Runs) >= 2
		})
		// Status over the API agrees with the CLI's.
		for _, id := range []string{d.Ran[0], d.Cancelled[0], d.Series} {
			apiState := apiStatus(ctx, t, base, viewer, id)
			out, _, err := f.CLI(ctx, "status", id, "--json")
			var cli struct {
				State string `json:"state"`
			}
			if err == nil {
				err = json.Unmarshal([]byte(out), &cli)
			}
			if err != nil || cli.State != apiState {
				t.Errorf("status of %s: the API says %q, the CLI %q (%v)", id, apiState, cli.State, err)
			}
		}
		if _, stderr, err := f.CLI(ctx, "cancel", d.Series); err != nil {
			t.Errorf("cancel the series %s: %v: %s", d.Series, err, stderr)
		}
	}
}

// apiStatus is GET /api/v1/tasks/{id}'s state.
func apiStatus(ctx context.Context, t *testing.T, base, token, id string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/tasks/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET status of %s: %d %v", id, resp.StatusCode, err)
	}
	return st.State
}

// TestPythonClientUnitTests runs the Python client's own tests (a
// scripted HTTP server: retries, Retry-After, errors, timeouts).
func TestPythonClientUnitTests(t *testing.T) {
	t.Parallel()
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-m", "unittest", "discover", "-s", "tests")
	cmd.Dir = filepath.Join(root, "clients", "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
}

// TestTypeScriptClientUnitTests runs the TypeScript client's own tests
// (built by make deps).
func TestTypeScriptClientUnitTests(t *testing.T) {
	t.Parallel()
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "clients", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "dist", "test")); err != nil {
		t.Fatalf("the TypeScript client is not built (%v): make deps builds it", err)
	}
	cmd := exec.Command("node", "--test", "dist/test/")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
}

// TestWorkerServesTheAPI: with admin.api a worker serves the API on its
// admin address (beside /healthz); a task scheduled there runs. Without
// it the admin address has no /api/v1.
func TestWorkerServesTheAPI(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	withAPI, without := freeAddr(t), freeAddr(t)
	if _, err := f.StartWorker("LEASECRON_ADMIN_ADDR="+withAPI, "LEASECRON_ADMIN_API=true"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.StartWorker("LEASECRON_ADMIN_ADDR=" + without); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := f.CLI(ctx, "tokens", "create", "svc", "--role", "scheduler")
	if err != nil {
		t.Fatalf("tokens create: %v: %s", err, stderr)
	}
	tok := strings.TrimSpace(out)
	waitFor(ctx, t, time.Minute, "the admin addresses", func() bool {
		a, _, _ := get(ctx, "http://"+withAPI+"/healthz")
		b, _, _ := get(ctx, "http://"+without+"/healthz")
		return a == 200 && b == 200
	})
	if code, _, err := get(ctx, "http://"+without+"/api/v1/openapi.json"); err != nil || code != 404 {
		t.Errorf("the API on a worker without admin.api: %d %v", code, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+withAPI+"/api/v1/tasks", strings.NewReader(`{"id":"via-worker","type":"rec"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("POST /api/v1/tasks on the worker's admin address: %d", resp.StatusCode)
	}
	if missing, err := f.WaitRecords(ctx, []string{"via-worker"}); err != nil {
		t.Fatalf("the task scheduled through the worker never ran: %v %v", missing, err)
	}
}

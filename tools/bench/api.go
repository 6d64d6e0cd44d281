package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// apiChunk is the tasks per schedule-many request, and apiConc how many
// requests are in flight: what a client of the API does with 10,000.
const (
	apiChunk = 1000
	apiConc  = 4
)

// runAPI is the HTTP API scenario (issue 40): N tasks scheduled with
// `leasecron schedule --file` (the built binary, one ScheduleMany),
// with the Go client's ScheduleMany in process, and through POST
// /api/v1/tasks:many (apiChunk tasks a request, apiConc at a time, the
// API served in process over its own counted client), each on a fresh
// Azurite; then, on an idle account, single schedules one after the other
// through the Go client and through POST /api/v1/tasks, for their
// latency. Every storage request of the in-process clients is counted.
func runAPI(ctx context.Context, b *bench) error {
	n := b.s.batchTasks
	res := results.API{Tasks: n, Chunk: apiChunk, Conc: apiConc}
	var err error
	if res.File, err = b.apiFileCase(ctx, n); err != nil {
		return fmt.Errorf("schedule --file: %w", err)
	}
	b.logf("api", "schedule --file: %d tasks in %.2f s (%.0f/s)", n, res.File.Seconds, res.File.PerSec)
	if res.GoMany, res.GoPerTask, err = b.apiGoManyCase(ctx, n); err != nil {
		return fmt.Errorf("ScheduleMany: %w", err)
	}
	b.logf("api", "Go ScheduleMany: %d tasks in %.2f s (%.0f/s), %.3f requests/task", n, res.GoMany.Seconds, res.GoMany.PerSec, res.GoPerTask)
	if res.APIMany, res.APIPerTask, err = b.apiManyCase(ctx, n); err != nil {
		return fmt.Errorf("POST /api/v1/tasks:many: %w", err)
	}
	res.Ratio = res.APIMany.PerSec / res.File.PerSec
	b.logf("api", "API tasks:many: %d tasks in %.2f s (%.0f/s, %.2f× schedule --file), %.3f requests/task", n, res.APIMany.Seconds, res.APIMany.PerSec, res.Ratio, res.APIPerTask)
	if res.Single, err = b.apiSingleCase(ctx, b.s.batchSingle/2); err != nil {
		return fmt.Errorf("single schedules: %w", err)
	}
	s := res.Single
	b.logf("api", "single schedules on an idle account (%d each): Go p50 %.1f ms p99 %.1f ms, %.2f requests; API p50 %.1f ms p99 %.1f ms, %.2f requests",
		s.N, s.GoP50MS, s.GoP99MS, s.GoPerTask, s.APIP50MS, s.APIP99MS, s.APIPerTask)
	return results.Write(b.out, results.APIFile, res)
}

func apiSpecs(prefix string, n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"id": fmt.Sprintf("%s-%06d", prefix, i), "type": noopType, "in": "1h", "payload": map[string]any{"n": i}}
	}
	return out
}

// apiFileCase runs `leasecron schedule --file` of n lines on a fresh
// Azurite.
func (b *bench) apiFileCase(ctx context.Context, n int) (results.Rate, error) {
	srv, err := b.startAzurite(ctx, "api")
	if err != nil {
		return results.Rate{}, err
	}
	defer srv.Stop()
	bin, err := proc.Binary()
	if err != nil {
		return results.Rate{}, err
	}
	dir, err := b.scratch("api")
	if err != nil {
		return results.Rate{}, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, s := range apiSpecs("file", n) {
		if err := enc.Encode(s); err != nil {
			return results.Rate{}, err
		}
	}
	path := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return results.Rate{}, err
	}
	// A first command creates the tables, as a running fleet has.
	if err := leasecronCmd(ctx, bin, srv, "list").Run(); err != nil {
		return results.Rate{}, fmt.Errorf("leasecron list: %w", err)
	}
	cmd := leasecronCmd(ctx, bin, srv, "schedule", "--file", path)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if err != nil {
		return results.Rate{}, fmt.Errorf("schedule --file: %w: %s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%d of %d tasks scheduled", n, n)) {
		return results.Rate{}, fmt.Errorf("schedule --file printed %s", out)
	}
	return results.NewRate(n, took, nil), nil
}

func leasecronCmd(ctx context.Context, bin string, srv *azurite.Server, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "LEASECRON_STORAGE_CONNECTION_STRING="+srv.ConnectionString(), "LEASECRON_CONFIG=/dev/null", "LEASECRON_LOG_LEVEL=warn")
	return cmd
}

// apiClient is a counted Client over srv whose tables exist already.
func apiClient(ctx context.Context, srv *azurite.Server) (*leasecron.Client, error) {
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: srv.ConnectionString()}, Logger: quietLogger("api")})
	if err != nil {
		return nil, err
	}
	// Warm up: tables and the container are created on first use.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "warm-up", Type: noopType, Due: time.Now().Add(time.Hour)}, nil); err != nil {
		return nil, err
	}
	if err := c.Audit(ctx, leasecron.AuditEntry{Who: "bench", Via: "bench", Action: "warm-up", OK: true}); err != nil {
		return nil, err
	}
	return c, nil
}

// apiGoManyCase is the Go client's ScheduleMany of n tasks.
func (b *bench) apiGoManyCase(ctx context.Context, n int) (results.Rate, float64, error) {
	srv, err := b.startAzurite(ctx, "api")
	if err != nil {
		return results.Rate{}, 0, err
	}
	defer srv.Stop()
	c, err := apiClient(ctx, srv)
	if err != nil {
		return results.Rate{}, 0, err
	}
	items := make([]leasecron.Item, n)
	now := time.Now()
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("go-%06d", i), Type: noopType, Payload: fmt.Sprintf(`{"n":%d}`, i), Due: now.Add(time.Hour)}
	}
	before := c.Requests().Total
	t0 := time.Now()
	res, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{})
	took := time.Since(t0)
	if err != nil {
		return results.Rate{}, 0, err
	}
	for _, r := range res {
		if r.Err != nil {
			return results.Rate{}, 0, r.Err
		}
	}
	return results.NewRate(n, took, nil), float64(c.Requests().Total-before) / float64(n), nil
}

// apiServer serves the API over a counted client of srv and returns its
// URL, an operator token and the client.
func apiServer(ctx context.Context, srv *azurite.Server) (*httptest.Server, string, *leasecron.Client, error) {
	c, err := apiClient(ctx, srv)
	if err != nil {
		return nil, "", nil, err
	}
	h, err := api.New(c, api.Options{Logger: quietLogger("api")})
	if err != nil {
		return nil, "", nil, err
	}
	_, tok, err := c.CreateToken(ctx, "bench", leasecron.RoleScheduler, nil, "bench")
	if err != nil {
		return nil, "", nil, err
	}
	return httptest.NewServer(h), tok, c, nil
}

// post sends body to the API and decodes the answer into out.
func post(ctx context.Context, url, tok string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var p map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return fmt.Errorf("%s: %d %v", url, resp.StatusCode, p)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// apiManyCase schedules n tasks through POST /api/v1/tasks:many.
func (b *bench) apiManyCase(ctx context.Context, n int) (results.Rate, float64, error) {
	srv, err := b.startAzurite(ctx, "api")
	if err != nil {
		return results.Rate{}, 0, err
	}
	defer srv.Stop()
	hs, tok, c, err := apiServer(ctx, srv)
	if err != nil {
		return results.Rate{}, 0, err
	}
	defer hs.Close()
	specs := apiSpecs("api", n)
	chunks := (n + apiChunk - 1) / apiChunk
	before := c.Requests().Total
	t0 := time.Now()
	var mu sync.Mutex
	scheduled := 0
	err = eachLimit(chunks, apiConc, func(i int) error {
		var out api.ScheduleManyResult
		if err := post(ctx, hs.URL+"/api/v1/tasks:many", tok, map[string]any{"tasks": specs[i*apiChunk : min(n, (i+1)*apiChunk)]}, &out); err != nil {
			return err
		}
		mu.Lock()
		scheduled += out.Scheduled
		mu.Unlock()
		return nil
	})
	took := time.Since(t0)
	if err != nil {
		return results.Rate{}, 0, err
	}
	if scheduled != n {
		return results.Rate{}, 0, fmt.Errorf("%d of %d scheduled", scheduled, n)
	}
	return results.NewRate(n, took, nil), float64(c.Requests().Total-before) / float64(n), nil
}

// apiSingleCase times n single schedules one after the other, through the
// Go client and through POST /api/v1/tasks, on one idle account.
func (b *bench) apiSingleCase(ctx context.Context, n int) (results.APISingle, error) {
	srv, err := b.startAzurite(ctx, "api")
	if err != nil {
		return results.APISingle{}, err
	}
	defer srv.Stop()
	hs, tok, c, err := apiServer(ctx, srv)
	if err != nil {
		return results.APISingle{}, err
	}
	defer hs.Close()
	s := results.APISingle{N: n}
	var goLat, apiLat []time.Duration
	// Interleaved, so that both meet the account in the same state.
	goReq, apiReq := int64(0), int64(0)
	for i := range n {
		before := c.Requests().Total
		t0 := time.Now()
		if _, err := c.Schedule(ctx, leasecron.Item{ID: fmt.Sprintf("gs-%05d", i), Type: noopType, Payload: `{"n":1}`, Due: time.Now().Add(time.Hour)}, nil); err != nil {
			return s, err
		}
		goLat = append(goLat, time.Since(t0))
		goReq += c.Requests().Total - before
		before = c.Requests().Total
		t0 = time.Now()
		var out api.TaskResult
		if err := post(ctx, hs.URL+"/api/v1/tasks", tok, map[string]any{"id": fmt.Sprintf("as-%05d", i), "type": noopType, "in": "1h", "payload": map[string]any{"n": 1}}, &out); err != nil {
			return s, err
		}
		apiLat = append(apiLat, time.Since(t0))
		apiReq += c.Requests().Total - before
	}
	pct := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))]) / float64(time.Millisecond)
	}
	s.GoP50MS, s.GoP99MS, s.APIP50MS, s.APIP99MS = pct(goLat, 0.5), pct(goLat, 0.99), pct(apiLat, 0.5), pct(apiLat, 0.99)
	s.GoPerTask, s.APIPerTask = float64(goReq)/float64(n), float64(apiReq)/float64(n)
	return s, nil
}

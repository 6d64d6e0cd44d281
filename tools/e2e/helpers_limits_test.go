package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// scheduleAll schedules items with 8 concurrent callers, fails t on the
// first error, and returns each task's due time as stored (100 ns ticks).
func scheduleAll(ctx context.Context, t *testing.T, cl *leasecron.Client, items []leasecron.Item) map[string]time.Time {
	t.Helper()
	work := make(chan leasecron.Item)
	errs := make(chan error, len(items))
	dues := make(map[string]time.Time, len(items))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				got, err := cl.Schedule(ctx, it, nil)
				if err != nil {
					errs <- fmt.Errorf("schedule %s: %w", it.ID, err)
					continue
				}
				mu.Lock()
				dues[got.ID] = got.Due
				mu.Unlock()
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return dues
}

// ids returns the ids of items.
func ids(items []leasecron.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// maxOverlap is the largest number of executions of the given tasks that
// were running at one instant, from their start and end records. A start
// without an end (a killed worker) counts as running until the last record.
func maxOverlap(rs []fleet.Record, want map[string]bool) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	open := map[string]int{} // id/worker → starts not yet ended
	for _, r := range rs {
		if !want[r.ID] {
			continue
		}
		k := r.ID + "/" + r.Worker
		switch r.Phase {
		case "start":
			evs = append(evs, ev{r.At, +1})
			open[k]++
		case "end":
			evs = append(evs, ev{r.At, -1})
			open[k]--
		}
	}
	// Ends sort before starts at the same instant: a slot handed over
	// within one nanosecond is not an overlap.
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// statsOut is the part of `leasecron stats --json` the tests read.
type statsOut struct {
	QueueDepth       int  `json:"queue_depth"`
	DueBacklog       int  `json:"due_backlog"`
	MoverHoldingBack bool `json:"mover_holding_back"`
	Limits           []struct {
		Type     string `json:"type"`
		Limit    int    `json:"limit"`
		Held     int    `json:"held"`
		Deferred int64  `json:"deferred"`
	} `json:"limits"`
}

// cliStats runs `leasecron stats --json` against the fleet.
func cliStats(ctx context.Context, f *fleet.Fleet) (statsOut, error) {
	var s statsOut
	out, errOut, err := f.CLI(ctx, "stats", "--json")
	if err != nil {
		return s, fmt.Errorf("leasecron stats --json: %w: %s", err, errOut)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return s, fmt.Errorf("leasecron stats --json printed %q: %w", out, err)
	}
	return s, nil
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// get fetches url and returns the status and body.
func get(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitStatus polls url every interval until it answers want, and returns
// how long that took.
func waitStatus(ctx context.Context, url string, want int, every time.Duration) (time.Duration, error) {
	start := time.Now()
	var last string
	for {
		code, body, err := get(ctx, url)
		if err == nil && code == want {
			return time.Since(start), nil
		}
		last = fmt.Sprintf("status %d %q err %v", code, strings.TrimSpace(body), err)
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("%s never answered %d (last: %s): %w", url, want, last, ctx.Err())
		case <-time.After(every):
		}
	}
}

// sample is one Prometheus sample: its name and label set.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is a scrape of a Prometheus text exposition.
type metrics []sample

// scrape reads url (a /metrics endpoint).
func scrape(ctx context.Context, url string) (metrics, error) {
	code, body, err := get(ctx, url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, code)
	}
	return parseMetrics(body)
}

// parseMetrics parses the text format: `name{k="v",...} value` lines.
func parseMetrics(text string) (metrics, error) {
	var out metrics
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s := sample{name: line[:sp], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(s.name, '{'); i >= 0 {
			ls := strings.TrimSuffix(s.name[i+1:], "}")
			s.name = s.name[:i]
			for _, kv := range splitLabels(ls) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("metrics line %q: bad label %q", line, kv)
				}
				uq, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("metrics line %q: label %q: %w", line, kv, err)
				}
				s.labels[k] = uq
			}
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQ, esc, from := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQ = !inQ
		case c == ',' && !inQ:
			out = append(out, s[from:i])
			from = i + 1
		}
	}
	if from < len(s) {
		out = append(out, s[from:])
	}
	return out
}

// sum adds the samples named name whose labels include every pair of
// labels (given as k, v, k, v, ...); found reports whether any matched.
func (m metrics) sum(name string, labels ...string) (total float64, found bool) {
	for _, s := range m {
		if s.name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
			found = true
		}
	}
	return total, found
}

// logLines reads a worker's JSON log and returns the lines that decode.
func logLines(t *testing.T, f *fleet.Fleet, worker string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.Dir, worker+".log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// logHas reports whether a worker's log contains msg.
func logHas(t *testing.T, f *fleet.Fleet, worker, msg string) bool {
	t.Helper()
	for _, l := range logLines(t, f, worker) {
		if m, _ := l["msg"].(string); strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

// TestParseMetrics checks the small exposition parser the tests rely on.
func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(`# HELP x y
# TYPE leasecron_tasks_total counter
leasecron_tasks_total{outcome="succeeded",type="rec"} 3
leasecron_tasks_total{outcome="failed",type="a,b \"q\""} 2
leasecron_lease_held 1
`)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.sum("leasecron_tasks_total", "type", "rec", "outcome", "succeeded"); !ok || v != 3 {
		t.Errorf("rec succeeded = %v, %v", v, ok)
	}
	if v, _ := m.sum("leasecron_tasks_total"); v != 5 {
		t.Errorf("all tasks = %v", v)
	}
	if v, _ := m.sum("leasecron_tasks_total", "type", `a,b "q"`); v != 2 {
		t.Errorf("quoted label = %v", v)
	}
	if v, ok := m.sum("leasecron_lease_held"); !ok || v != 1 {
		t.Errorf("lease held = %v, %v", v, ok)
	}
	if _, ok := m.sum("nope"); ok {
		t.Error("found a metric that is not there")
	}
}

// TestMaxOverlap checks the overlap count on hand-made records.
func TestMaxOverlap(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	rs := []fleet.Record{
		{ID: "a", Worker: "w1", At: at(0), Phase: "start"},
		{ID: "b", Worker: "w2", At: at(1), Phase: "start"},
		{ID: "a", Worker: "w1", At: at(2), Phase: "end"},
		{ID: "c", Worker: "w1", At: at(2), Phase: "start"}, // hand-over at the same instant
		{ID: "x", Worker: "w1", At: at(2), Phase: "start"}, // not asked about
		{ID: "b", Worker: "w2", At: at(3), Phase: "end"},
		{ID: "c", Worker: "w1", At: at(4), Phase: "end"},
	}
	if got := maxOverlap(rs, map[string]bool{"a": true, "b": true, "c": true}); got != 2 {
		t.Fatalf("max overlap %d, want 2", got)
	}
}

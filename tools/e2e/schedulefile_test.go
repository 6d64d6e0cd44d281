package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// pendingIDs lists every pending task id.
func pendingIDs(ctx context.Context, t *testing.T, cl *leasecron.Client) map[string]leasecron.Item {
	t.Helper()
	out := map[string]leasecron.Item{}
	token := ""
	for {
		p, err := cl.List(ctx, &leasecron.ListOptions{Limit: 1000, Continuation: token})
		page, next := p.Items, p.Continue
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page {
			out[it.ID] = it
		}
		if next == "" {
			return out
		}
		token = next
	}
}

func writeLines(t *testing.T, dir, name string, lines []string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScheduleFile: `leasecron schedule --file` with 10,000 lines schedules
// them all; a file with one malformed line applies nothing and names the
// line; a line whose id is pending undoes the file unless --partial.
func TestScheduleFile(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	var lines []string
	for i := range 10_000 {
		lines = append(lines, fmt.Sprintf(`{"id":"bulk-%05d","type":"rec","payload":{"n":%d},"in":"1h"}`, i, i))
	}
	began := time.Now()
	out := lcCLI(ctx, t, f, "schedule", "--file", writeLines(t, dir, "bulk.jsonl", lines))
	took := time.Since(began)
	if !strings.Contains(out, "10000 of 10000 tasks scheduled") {
		t.Fatalf("schedule --file said %q", out)
	}
	pending := pendingIDs(ctx, t, cl)
	if len(pending) != 10_000 || pending["bulk-04242"].Payload != `{"n":4242}` || pending["bulk-04242"].Type != "rec" {
		t.Fatalf("%d tasks pending, bulk-04242 = %+v", len(pending), pending["bulk-04242"])
	}
	t.Logf("10,000 lines scheduled by the CLI in %s", took.Round(time.Millisecond))

	bad := []string{
		`{"id":"ok-1","type":"rec","in":"1h"}`,
		`{"id":"ok-2","type":"rec","in":"1h"}`,
		`{"id":"bad-3","type":"rec","in":"soon"}`,
		`{"id":"ok-4","type":"rec","in":"1h"}`,
	}
	stdout, stderr, code := lcRun(ctx, f, nil, "schedule", "--file", writeLines(t, dir, "bad.jsonl", bad))
	if code != 2 || !strings.Contains(stdout, "line 3: bad-3 invalid") || !strings.Contains(stdout, `delay "soon"`) {
		t.Fatalf("a file with a bad line: exit %d\n%s%s", code, stdout, stderr)
	}
	if p := pendingIDs(ctx, t, cl); len(p) != 10_000 {
		t.Fatalf("a refused file applied %d tasks", len(p)-10_000)
	}

	dup := []string{
		`{"id":"new-1","type":"rec","in":"1h"}`,
		`{"id":"bulk-00007","type":"rec","in":"2h"}`,
		`{"id":"new-3","type":"rec","in":"1h"}`,
	}
	path := writeLines(t, dir, "dup.jsonl", dup)
	stdout, _, code = lcRun(ctx, f, nil, "schedule", "--file", path, "--json")
	var res []struct {
		Line   int    `json:"line"`
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || len(res) != 3 || res[1].Status != "duplicate" || res[0].Status != "not_written" {
		t.Fatalf("a file with a pending id: exit %d, %+v, %v\n%s", code, res, err, stdout)
	}
	if p := pendingIDs(ctx, t, cl); len(p) != 10_000 || !p["bulk-00007"].Due.Before(time.Now().Add(61*time.Minute)) {
		t.Fatalf("the refused file changed the schedule: %d pending", len(p))
	}
	stdout, _, code = lcRun(ctx, f, nil, "schedule", "--file", path, "--partial")
	if code != 1 || !strings.Contains(stdout, "line 2: bulk-00007 duplicate") || !strings.Contains(stdout, "2 of 3 tasks scheduled") {
		t.Fatalf("--partial: exit %d\n%s", code, stdout)
	}
	if p := pendingIDs(ctx, t, cl); len(p) != 10_002 {
		t.Fatalf("--partial left %d pending, want 10,002", len(p))
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestBlackboardCLI drives the blackboard through the CLI against two
// worker processes: add keys, run one now, watch `blackboard --json`,
// remove, and check the refusals.
func TestBlackboardCLI(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, map[string]any{"blackboard": map[string]any{"cycle": "500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := func(args ...string) (string, string, int) {
		out, stderr, err := f.CLI(ctx, args...)
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out, stderr, code
	}
	// A key due at once (never ran) and one that runs only when asked.
	if _, stderr, code := cli("blackboard", "add", "alpha", "--every", "1h", "--type", "rec", "payload-a"); code != 0 {
		t.Fatalf("add alpha: %d %s", code, stderr)
	}
	if _, stderr, code := cli("blackboard", "add", "alpha", "--every", "1h", "--type", "rec"); code == 0 || !strings.Contains(stderr, "alpha") {
		t.Fatalf("duplicate add: exit %d %q", code, stderr)
	}
	if _, stderr, code := cli("blackboard", "add", "bad/key", "--every", "1h", "--type", "rec"); code != 2 || !strings.Contains(stderr, "bad/key") {
		t.Fatalf("bad key: exit %d %q", code, stderr)
	}
	type row struct {
		Key     string `json:"key"`
		State   string `json:"state"`
		Running bool   `json:"running"`
		Worker  string `json:"worker"`
		Runs    int64  `json:"runs"`
	}
	board := func() map[string]row {
		out, stderr, code := cli("blackboard", "--json")
		if code != 0 {
			t.Fatalf("blackboard: %d %s", code, stderr)
		}
		var rows []row
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("blackboard --json: %v\n%s", err, out)
		}
		m := map[string]row{}
		for _, r := range rows {
			m[r.Key] = r
		}
		return m
	}
	waitRuns := func(key string, n int64) row {
		for {
			r := board()[key]
			if r.Runs >= n && !r.Running {
				return r
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never reached %d runs: %+v", key, n, r)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	r := waitRuns("alpha", 1)
	if r.Worker == "" || r.State != "waiting" {
		t.Errorf("after its first run alpha is %+v", r)
	}
	// Within its hour it stays put until run-now.
	time.Sleep(2 * time.Second)
	if got := board()["alpha"].Runs; got != 1 {
		t.Fatalf("alpha ran %d times within its interval", got)
	}
	if _, stderr, code := cli("blackboard", "run-now", "alpha"); code != 0 {
		t.Fatalf("run-now: %d %s", code, stderr)
	}
	waitRuns("alpha", 2)
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	var runs []fleet.Record
	for _, r := range rs {
		if strings.HasPrefix(r.ID, "alpha@") {
			runs = append(runs, r)
		}
	}
	if len(runs) != 2 {
		t.Fatalf("handler saw alpha %d times, want 2: %+v", len(runs), runs)
	}
	if out, _, code := cli("blackboard"); code != 0 || !strings.Contains(out, "alpha") || !strings.Contains(out, "KEY") {
		t.Errorf("blackboard table: %d\n%s", code, out)
	}
	if _, stderr, code := cli("blackboard", "remove", "alpha"); code != 0 {
		t.Fatalf("remove: %d %s", code, stderr)
	}
	if _, ok := board()["alpha"]; ok {
		t.Error("alpha still on the board after remove")
	}
	for _, args := range [][]string{{"blackboard", "remove", "nosuch"}, {"aggregator", "run-now", "nosuch"}} {
		if _, stderr, code := cli(args...); code != 3 || !strings.Contains(stderr, "nosuch") {
			t.Errorf("%v: exit %d %q, want 3 naming the key", args, code, stderr)
		}
	}
}

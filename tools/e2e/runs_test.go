package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// runsOut is `leasecron runs --json`.
type runsOut struct {
	Runs []struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		Type      string `json:"type"`
		Series    string `json:"series"`
		Attempts  int    `json:"attempts"`
		LastError string `json:"last_error"`
	} `json:"runs"`
	Next string `json:"next"`
}

// The run history from the command line: runs by state, of a series, paged
// with --continue, bad input refused with exit 2; runs check finds the
// table consistent; runs clean and migrate run on a live table.
func TestRunHistoryCommands(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1, map[string]any{"retry": map[string]any{"max_attempts": 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list := func(args ...string) runsOut {
		t.Helper()
		var out runsOut
		s := lcCLI(ctx, t, f, append([]string{"runs", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			t.Fatalf("runs %v: %v\n%s", args, err, s)
		}
		return out
	}
	ids := func(o runsOut) string {
		var s []string
		for _, r := range o.Runs {
			s = append(s, r.ID+":"+r.State)
		}
		return strings.Join(s, " ")
	}

	lcCLI(ctx, t, f, "schedule", "--id", "ok1", "--type", "rec", "--at", time.Now().Add(-3*time.Second).UTC().Format(time.RFC3339))
	lcCLI(ctx, t, f, "schedule", "--id", "ok2", "--type", "rec", "--at", time.Now().Add(-2*time.Second).UTC().Format(time.RFC3339))
	lcCLI(ctx, t, f, "schedule", "--id", "bad1", "--type", "fail", "--at", time.Now().Add(-1*time.Second).UTC().Format(time.RFC3339))
	lcCLI(ctx, t, f, "schedule", "--id", "tick", "--type", "rec", "--every", "2s")
	for _, id := range []string{"ok1", "ok2"} {
		lcWaitStatus(ctx, t, f, id, 30*time.Second, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	}
	lcWaitStatus(ctx, t, f, "bad1", 30*time.Second, "dead", func(s lcStatus) bool { return s.State == "dead" })
	deadline := time.Now().Add(30 * time.Second)
	var series runsOut
	for {
		series = list("--series", "tick", "--state", "succeeded")
		if len(series.Runs) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	lcCLI(ctx, t, f, "cancel", "tick")
	if len(series.Runs) < 3 {
		t.Fatalf("series tick: %s, want at least 3 succeeded occurrences", ids(series))
	}
	for i, r := range series.Runs {
		if r.Series != "tick" || !strings.HasPrefix(r.ID, "tick@") || (i > 0 && r.ID >= series.Runs[i-1].ID) {
			t.Fatalf("series listing not newest first or not the series': %s", ids(series))
		}
	}

	if got := ids(list("--state", "dead")); got != "bad1:dead" {
		t.Errorf("runs --state dead = %s", got)
	}
	if r := list("--state", "dead").Runs; len(r) != 1 || !strings.Contains(r[0].LastError, "exit") {
		t.Errorf("the dead run's last error is %+v", r)
	}
	// ok2 is due after ok1: newest first.
	if got := ids(list("--type", "rec", "--state", "succeeded", "--since", "1m")); !strings.Contains(got, "ok2:succeeded ok1:succeeded") {
		t.Errorf("runs --type rec --state succeeded = %s", got)
	}
	// Paging: one run a page, each page's token for the next.
	seen := map[string]bool{}
	page := list("--limit", "1", "--state", "succeeded", "--type", "rec")
	for n := 0; ; n++ {
		if len(page.Runs) > 1 || n > 50 {
			t.Fatalf("page %d: %s", n, ids(page))
		}
		for _, r := range page.Runs {
			if seen[r.ID] {
				t.Fatalf("%s on two pages", r.ID)
			}
			seen[r.ID] = true
		}
		if page.Next == "" {
			break
		}
		page = list("--limit", "1", "--state", "succeeded", "--type", "rec", "--continue", page.Next)
	}
	if !seen["ok1"] || !seen["ok2"] || len(seen) < 5 {
		t.Errorf("paging saw %v", seen)
	}

	for _, bad := range [][]string{{"--state", "done"}, {"--limit", "0"}, {"--limit", "5000"}, {"--continue", "nonsense"}} {
		_, errOut, code := lcRun(ctx, f, nil, append([]string{"runs"}, bad...)...)
		if code != 2 || errOut == "" {
			t.Errorf("runs %v: exit %d, stderr %q; want exit 2 with a message", bad, code, errOut)
		}
	}
	if out := lcCLI(ctx, t, f, "runs", "check"); !strings.Contains(out, ", 0 problems") {
		t.Errorf("runs check: %s", out)
	}
	if out := lcCLI(ctx, t, f, "runs", "clean"); !strings.Contains(out, "removed 0 expired run records") {
		t.Errorf("runs clean on a young table: %s", out)
	}
	if out := lcCLI(ctx, t, f, "migrate"); !strings.Contains(out, "converted 0") {
		t.Errorf("migrate on a table of the current layout: %s", out)
	}
}

// The leader removes expired run records by itself: with runs.retention
// 1m and runs.clean_every 1m, a succeeded run's status says its record
// expired once the minute has passed, and within the leader's next
// cleaning pass the record is gone.
func TestRunRetentionByLeader(t *testing.T) {
	// Long (make test-long): minutes of waiting that make test's 15-minute
	// budget cannot afford.
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	f := startFleet(t, 1, map[string]any{"runs": map[string]any{"retention": "1m", "clean_every": "1m"}, "retry": map[string]any{"backoff_max": "30s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lcCLI(ctx, t, f, "schedule", "--id", "brief", "--type", "rec")
	lcWaitStatus(ctx, t, f, "brief", 30*time.Second, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	finished := time.Now()
	var expiredSeen bool
	for {
		_, errOut, code := lcRun(ctx, f, nil, "status", "brief")
		switch {
		case code == 3 && strings.Contains(errOut, "expired"):
			expiredSeen = true
		case code == 3:
			if !expiredSeen && time.Since(finished) < time.Minute {
				t.Fatalf("brief's record vanished %s after it finished, before its retention of 1m: %s", time.Since(finished).Round(time.Second), errOut)
			}
			// Removed: neither listed nor found.
			if out := lcCLI(ctx, t, f, "runs", "--json"); strings.Contains(out, `"brief"`) {
				t.Fatalf("brief is gone for status but listed: %s", out)
			}
			t.Logf("brief: record expired after 1m and removed by the leader %s after it finished (seen as expired before: %v)", time.Since(finished).Round(time.Second), expiredSeen)
			return
		case code != 0:
			t.Fatalf("status brief: exit %d: %s", code, errOut)
		case time.Since(finished) > time.Minute+5*time.Second:
			t.Fatalf("brief still shows as live %s after it finished (retention 1m)", time.Since(finished).Round(time.Second))
		}
		if time.Since(finished) > 3*time.Minute+30*time.Second {
			t.Fatal("the leader has not removed the expired record within two cleaning intervals")
		}
		time.Sleep(2 * time.Second)
	}
}

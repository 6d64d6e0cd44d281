package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// failpointEnv is internal/failpoint.Env: a worker started with it kills
// itself (SIGKILL) at the named point.
const failpointEnv = "LEASECRON_FAILPOINT"

// A worker is SIGKILLed at the moment that matters, again and again: as it
// counts the last member of a batch (before releasing the callback), just
// after releasing the callback (before deleting the member's message), as
// a parent's end is about to release its child, and just after releasing
// it (WORKFLOW_KILLS times in all, the points in turn). Each time another
// worker finishes the job: the callback runs once
// with the right counts; the chain runs whole, in order.
func TestWorkflowSurvivesKills(t *testing.T) {
	t.Parallel()
	// Once per point in make test; ten times per point in make test-long.
	reps := 4
	if os.Getenv("LEASECRON_LONG") != "" {
		reps = 40
	}
	if v, err := strconv.Atoi(os.Getenv("WORKFLOW_KILLS")); err == nil && v > 0 {
		reps = v
	}
	f := startFleet(t, 0, map[string]any{
		"worker": map[string]any{"visibility_timeout": "5s"},
		"handlers": map[string]any{
			"cb": map[string]any{"exec": []string{"/bin/sh", "-c", `printf '%s %s\n' "$LEASECRON_TASK_ID" "$LEASECRON_BATCH_COUNTS" >> "$FLEET_RECORD.cb"`}},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	points := []string{"batch-complete", "callback-released", "parent-ended", "child-released"}
	const members = 20
	var chains [][]string
	var batches []string
	skipped := 0
	for i := 0; i < reps+skipped; i++ {
		point := points[(i-skipped)%len(points)]
		doomed, err := f.StartWorker(failpointEnv + "=" + point)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		var wait string
		switch point {
		case "batch-complete", "callback-released":
			batch := fmt.Sprint("k", i)
			batches = append(batches, batch)
			// Due a little ahead, so that the batch is sealed before its
			// members end: a batch whose members have all ended when it is
			// sealed is completed by the scheduling client, not a worker.
			items := make([]leasecron.Item, members)
			for j := range items {
				items[j] = leasecron.Item{ID: fmt.Sprintf("%s-m%02d", batch, j), Type: "rec", Due: time.Now().Add(2 * time.Second)}
			}
			if _, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{Batch: batch, OnComplete: &leasecron.Item{Type: "cb"}}); err != nil {
				t.Fatal(err)
			}
			wait = batch + "-done"
		default:
			chain := []string{fmt.Sprint("c", i, "-a"), fmt.Sprint("c", i, "-b"), fmt.Sprint("c", i, "-c")}
			items := []leasecron.Item{{ID: chain[0], Type: "recslow", Payload: "0.2", Due: time.Now()},
				{ID: chain[1], Type: "recslow", Payload: "0.2", Due: time.Now(), After: chain[:1]},
				{ID: chain[2], Type: "recslow", Payload: "0.2", Due: time.Now(), After: chain[1:2]}}
			if _, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
				t.Fatal(err)
			}
			chains = append(chains, chain)
			wait = chain[2]
		}
		if !killedAt(ctx, t, f, cl, doomed, wait) {
			if !strings.HasPrefix(wait, "k") {
				t.Fatalf("rep %d: %s finished, and the worker armed at %s was never killed", i, wait, point)
			}
			// Scheduling took longer than the members' 2 s (a loaded
			// machine): they all ended before the seal, so the client
			// completed the batch and no worker reached the point. The
			// callback still must have run once (checked below).
			// The rep is run again.
			t.Logf("rep %d: every member of k%d ended before it was sealed, so the scheduling client completed it and no worker reached %s; again", i, i, point)
			if err := f.Worker(doomed).Stop(20 * time.Second); err != nil {
				t.Logf("stopping %s: %v", doomed, err)
			}
			if skipped++; skipped > 3 {
				t.Fatalf("the scheduling client completed %d batches itself: scheduling 20 tasks took over 2 s each time", skipped)
			}
			continue
		}
		heir, err := f.StartWorker()
		if err != nil {
			t.Fatal(err)
		}
		for {
			st, err := cl.Status(ctx, wait)
			if err == nil && st.Run != nil && st.Run.State.Finished() {
				if st.Run.State != leasecron.RunSucceeded {
					t.Errorf("rep %d (%s): %s ended %s: %s", i, point, wait, st.Run.State, st.Run.LastError)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("rep %d (%s): %s never ran: %+v %v", i, point, wait, st, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("rep %d: killed at %s; %s done %s later", i, point, wait, time.Since(began).Round(100*time.Millisecond))
		if err := f.Worker(heir).Stop(20 * time.Second); err != nil {
			t.Logf("stopping %s: %v", heir, err)
		}
	}
	// Every callback ran once, with the counts of a whole batch.
	b, err := os.ReadFile(f.RecordFile + ".cb")
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, counts, _ := strings.Cut(line, " ")
		ran[id]++
		var c leasecron.BatchCounts
		if err := json.Unmarshal([]byte(counts), &c); err != nil || c != (leasecron.BatchCounts{Total: members, Succeeded: members}) {
			t.Errorf("callback %s got counts %q", id, counts)
		}
	}
	for _, b := range batches {
		if id := b + "-done"; ran[id] != 1 {
			t.Errorf("callback %s ran %d times, want once", id, ran[id])
		}
	}
	// Every chain ran whole, each step after the one before had ended.
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts, ends := fleet.Starts(rs), fleet.Ends(rs)
	for _, ch := range chains {
		for k, id := range ch {
			if len(starts[id]) == 0 {
				t.Errorf("%s never ran", id)
				continue
			}
			if k == 0 {
				continue
			}
			prev := ends[ch[k-1]]
			if len(prev) == 0 || starts[id][0].At.Before(prev[len(prev)-1].At) {
				t.Errorf("%s started at %s, before %s ended (%v)", id, starts[id][0].At.Format(time.RFC3339Nano), ch[k-1], prev)
			}
		}
	}
}

// From the CLI: a chain with --after, a file batch with --on-complete,
// `batch`, `runs --batch`, `status` of a waiting task, and the refusals.
func TestWorkflowFromTheCLI(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1, map[string]any{
		"handlers": map[string]any{
			"cb": map[string]any{"exec": []string{"/bin/sh", "-c", `printf '%s %s\n' "$LEASECRON_TASK_ID" "$LEASECRON_BATCH_COUNTS" >> "$FLEET_RECORD.cb"`}},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli := func(args ...string) string {
		t.Helper()
		out, stderr, err := f.CLI(ctx, args...)
		if err != nil {
			t.Fatalf("leasecron %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}
	cli("schedule", "--id", "cli-a", "--type", "recslow", "--in", "1h", "0.2")
	cli("schedule", "--id", "cli-b", "--type", "rec", "--after", "cli-a")
	out := cli("status", "cli-b")
	if !strings.Contains(out, "waiting") || !strings.Contains(out, "after") || !strings.Contains(out, "cli-a") {
		t.Errorf("status of a waiting task:\n%s", out)
	}
	for _, bad := range [][]string{
		{"schedule", "--id", "cli-x", "--after", "nope"},
		{"schedule", "--id", "cli-a", "--replace", "--after", "cli-b"},
		{"schedule", "--id", "cli-y", "--after-any"},
	} {
		if _, stderr, err := f.CLI(ctx, bad...); err == nil || !strings.Contains(err.Error(), "exit status 2") {
			t.Errorf("leasecron %s: %v %s; want exit 2", strings.Join(bad, " "), err, stderr)
		}
	}
	cli("reschedule", "cli-a", "--in", "1s")
	file := filepath.Join(t.TempDir(), "batch.jsonl")
	var lines []string
	for i := range 5 {
		lines = append(lines, fmt.Sprintf(`{"id": "cli-m%d", "type": "rec"}`, i))
	}
	lines = append(lines, `{"id": "cli-after", "type": "rec", "after": ["cli-m0", "cli-m1"]}`)
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cli("schedule", "--file", file, "--batch", "clib", "--on-complete", "cb"); !strings.Contains(out, "6 of 6 tasks scheduled") || !strings.Contains(out, "batch clib") {
		t.Errorf("schedule --file --batch:\n%s", out)
	}
	lcWaitRecords(ctx, t, f, 2*time.Minute, "cli-a", "cli-b", "cli-after")
	var b leasecron.BatchStatus
	for {
		if err := json.Unmarshal([]byte(cli("batch", "clib", "--json")), &b); err != nil {
			t.Fatal(err)
		}
		if b.Complete || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b.Counts != (leasecron.BatchCounts{Total: 6, Succeeded: 6}) || b.Callback != "clib-done" {
		t.Errorf("batch clib: %+v", b)
	}
	if out := cli("batch", "clib", "--members"); !strings.Contains(out, "cli-m4") || !strings.Contains(out, "complete") {
		t.Errorf("batch --members:\n%s", out)
	}
	if out := cli("runs", "--batch", "clib", "--limit", "100"); strings.Count(out, "cli-") != 6 {
		t.Errorf("runs --batch clib:\n%s", out)
	}
	for {
		st, err := func() (leasecron.Status, error) { c, _ := f.Client(); return c.Status(ctx, "clib-done") }()
		if err == nil && st.Run != nil && st.Run.State == leasecron.RunSucceeded {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the callback never ran: %+v %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if cb, _ := os.ReadFile(f.RecordFile + ".cb"); string(cb) != `clib-done {"total":6,"succeeded":6,"dead":0,"cancelled":0}`+"\n" {
		t.Errorf("callback records %q", cb)
	}
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts, ends := fleet.Starts(rs), fleet.Ends(rs)
	if s, e := starts["cli-b"], ends["cli-a"]; len(s) == 0 || len(e) == 0 || s[0].At.Before(e[0].At) {
		t.Errorf("cli-b started %v, cli-a ended %v", s, e)
	}
}

// killedAt waits until the worker doomed (armed with a failpoint) has
// killed itself, and reports true; or, when the task wait has finished
// without that, false (the point was not on wait's path).
func killedAt(ctx context.Context, t *testing.T, f *fleet.Fleet, cl *leasecron.Client, doomed, wait string) bool {
	t.Helper()
	for {
		select {
		case <-f.Worker(doomed).Done():
			if err := f.Worker(doomed).Err(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("the worker armed with a failpoint (%s) ended with %v, want killed", doomed, err)
			}
			return true
		case <-ctx.Done():
			t.Fatalf("the worker armed with a failpoint (%s) never reached it", doomed)
		case <-time.After(time.Second):
			if st, err := cl.Status(ctx, wait); err == nil && st.Run != nil && st.Run.State.Finished() {
				select {
				case <-f.Worker(doomed).Done():
					continue // killed meanwhile: the first case reports it
				default:
					return false
				}
			}
		}
	}
}

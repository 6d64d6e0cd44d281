package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// The regression tests of issue 38: four places where two features of
// leasecron crossed (a unique key and a retry's backoff, a bulk requeue
// and tasks that die again, the shard count and a fresh account, the run
// records' growing partitions and a worker still on one shard), each
// driven through the built binary as a user would.

// crRecord is a /bin/sh line appending a record of the given phase for
// the task (the format of fleet.BaseConfig's rec handler: a phase other
// than "start" or "end" is kept by fleet.ReadRecords but counted by
// neither fleet.Starts nor fleet.Ends).
func crRecord(phase string) string {
	return `printf '%s %s %s %s %s ` + phase + `\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"`
}

// crRunEnv runs the CLI against f with extra environment (a client
// configured otherwise than the fleet's file); code as lcRun.
func crRunEnv(ctx context.Context, f *fleet.Fleet, env []string, args ...string) (stdout, stderr string, code int) {
	stdout, stderr, err := proc.Run(ctx, f.Bin, append(f.Env(), env...), nil, args...)
	return stdout, stderr, exitCodeOf(err, &stderr)
}

// exitCodeOf is lcRun's reading of a process error: 0, the exit code, or
// -1 (with the error appended to stderr) when the process could not run.
func exitCodeOf(err error, stderr *string) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode()
	}
	*stderr += err.Error()
	return -1
}

// TestUniqueKeyHeldDuringRetryBackoff: a task scheduled with --unique-key
// whose first attempt fails holds its key while it waits for its retry
// (README "Unique tasks": "a task holds its key while it is pending,
// queued, running, snoozed or between attempts"): a second `schedule
// --unique-key` of the same type and key during the backoff exits 4 and
// prints the first task's id, and creates nothing; once the first task has
// succeeded (--unique-for 0, the default) the key is free again. A
// regression test for issue 38: a failed attempt sets the run's Finished
// time, and a key whose window is 0 was taken as released from that
// moment, so the second schedule was accepted (exit 0) and two tasks of
// one key were live at once.
func TestUniqueKeyHeldDuringRetryBackoff(t *testing.T) {
	// Long (make test-long): make test covers the defect with the
	// library's own tests, and keeps its 15-minute budget.
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	// retryonce fails its first attempt (recording "failed") and succeeds
	// from the second (recording "start"). A 40 s base backoff, jittered
	// over [20 s, 40 s], leaves at least 20 s between the attempts.
	retryonce := `if [ "$LEASECRON_ATTEMPT" = 1 ]; then ` + crRecord("failed") + `; echo "first attempt fails on purpose" >&2; exit 3; fi; ` + crRecord("start")
	f := startFleet(t, 1, map[string]any{
		"retry":    map[string]any{"max_attempts": 3, "backoff_base": "40s", "backoff_max": "1m"},
		"handlers": map[string]any{"retryonce": map[string]any{"exec": []string{"/bin/sh", "-c", retryonce}}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	first := strings.TrimSpace(lcCLI(ctx, t, f, "schedule", "--type", "retryonce", "--unique-key", "k", "first"))
	if first == "" {
		t.Fatal("schedule printed no id")
	}
	// The first attempt fails; the run then waits for its retry.
	st := lcWaitStatus(ctx, t, f, first, 90*time.Second, "its first attempt failed", func(s lcStatus) bool {
		return s.Run != nil && s.Run.State == "failed" && s.Run.Attempts == 1
	})
	failedAt := time.Now()
	t.Logf("%s: first attempt failed (%q); waiting for its retry", first, st.Run.LastError)

	// During the backoff the key is held: refused, the holder named,
	// nothing created — in text and in JSON.
	out, errOut, code := lcRun(ctx, f, nil, "schedule", "--type", "retryonce", "--unique-key", "k", "second")
	if code != 4 || strings.TrimSpace(out) != first {
		t.Fatalf("a second schedule of key k while %s waits for its retry: exit %d, stdout %q, stderr %q; want exit 4 naming %s", first, code, out, errOut, first)
	}
	out, errOut, code = lcRun(ctx, f, nil, "schedule", "--type", "retryonce", "--unique-key", "k", "--json", "third")
	var dup struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if code != 4 || json.Unmarshal([]byte(out), &dup) != nil || dup.ID != first || !dup.Duplicate {
		t.Fatalf("schedule --json of key k while %s waits for its retry: exit %d, stdout %q, stderr %q; want exit 4 and {\"id\": %q, \"duplicate\": true}", first, code, out, errOut, first)
	}
	// Both refusals happened within the backoff: the retry has not run.
	st, _, err := lcGetStatus(ctx, f, first)
	if err != nil || st.Run == nil || st.Run.State != "failed" || st.Run.Attempts != 1 || len(lcStarts(t, f, first)) != 0 {
		b, _ := json.Marshal(st)
		t.Fatalf("the refusals were meant to fall within %s's backoff, but its status is now %s (%v): the test's timing is off", first, b, err)
	}
	if pending := lcCLI(ctx, t, f, "list", "--json"); strings.Contains(pending, `"id"`) {
		t.Fatalf("pending tasks after the refusals: %s; want none", pending)
	}
	t.Logf("two schedules of key k refused %s after the failed attempt, both naming %s", time.Since(failedAt).Round(100*time.Millisecond), first)

	// The retry succeeds; with --unique-for 0 the key is free at once.
	st = lcWaitStatus(ctx, t, f, first, 2*time.Minute, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	t.Logf("%s succeeded on attempt %d, %s after the failed one", first, st.Run.Attempts, time.Since(failedAt).Round(100*time.Millisecond))
	out, errOut, code = lcRun(ctx, f, nil, "schedule", "--type", "retryonce", "--unique-key", "k", "--in", "1h", "after")
	next := strings.TrimSpace(out)
	if code != 0 || next == "" || next == first {
		t.Fatalf("schedule of key k after %s succeeded: exit %d, stdout %q, stderr %q; want exit 0 and a new task", first, code, out, errOut)
	}

	// Safety: the first task ran twice (one failure, one success), and
	// no other task of the key ever ran.
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string][]string{}
	for _, r := range rs {
		phases[r.ID] = append(phases[r.ID], r.Phase)
	}
	if got := strings.Join(phases[first], ","); got != "failed,start" || len(phases) != 1 {
		t.Fatalf("executions recorded: %v; want only %s's, a failed attempt then a successful one", phases, first)
	}
}

// TestBulkRequeueRunsEachDeadLetterOnceMore: 30 tasks whose handler always
// fails die after their one attempt (retry.max_attempts 1); `leasecron
// bulk requeue-dead --type failrec --yes --wait` requeues each of the 30
// dead letters exactly once, and reports 30 requeued of 30; each task then
// runs once more and dies again, so every task has run exactly twice, the
// poison queue holds the 30 again, and the operation's record (`bulk
// status`, `bulk list`) says done 30. A regression test for issue 38: the
// operation walked the poison queue until a walk requeued nothing, and
// the requeued tasks that died again meanwhile were requeued again by the
// same operation (98 requeued "of 30 matching when confirmed", tasks run
// three or four times).
func TestBulkRequeueRunsEachDeadLetterOnceMore(t *testing.T) {
	// Long (make test-long): make test covers the defect with the
	// library's own tests, and keeps its 15-minute budget.
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	f := startFleet(t, 2, map[string]any{
		"retry":    map[string]any{"max_attempts": 1},
		"handlers": map[string]any{"failrec": map[string]any{"exec": []string{"/bin/sh", "-c", crRecord("start") + `; echo "failing on purpose" >&2; exit 7`}}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	const n = 30
	var ids []string
	var file strings.Builder
	for i := range n {
		id := fmt.Sprintf("bf%02d", i)
		ids = append(ids, id)
		fmt.Fprintf(&file, `{"id": %q, "type": "failrec", "payload": "p"}`+"\n", id)
	}
	if out, errOut, code := lcRun(ctx, f, strings.NewReader(file.String()), "schedule", "--file", "-"); code != 0 {
		t.Fatalf("schedule --file: exit %d\n%s\n%s", code, out, errOut)
	}

	// deadLetters lists the poison queue: how many records, by task id.
	deadLetters := func() (map[string]int, int) {
		out := lcCLI(ctx, t, f, "deadletter", "list", "--json")
		var dls []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(out), &dls); err != nil {
			t.Fatalf("deadletter list --json: %v\n%s", err, out)
		}
		by := map[string]int{}
		for _, d := range dls {
			by[d.ID]++
		}
		return by, len(dls)
	}
	waitDead := func(what string, starts int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			by, total := deadLetters()
			runs := fleet.Starts(mustRecords(t, f))
			done := total == n
			for _, id := range ids {
				done = done && by[id] == 1 && len(runs[id]) == starts
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				missing := 0
				for _, id := range ids {
					if by[id] == 0 {
						missing++
					}
				}
				t.Fatalf("%s: after 3 min the poison queue holds %d records (%d of the %d tasks missing): %v; runs per task: %v", what, total, missing, n, by, runCounts(runs, ids))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitDead("the first deaths", 1)

	if out := lcCLI(ctx, t, f, "bulk", "requeue-dead", "--type", "failrec"); !strings.Contains(out, fmt.Sprintf("%d dead letter(s) match", n)) {
		t.Fatalf("bulk requeue-dead --type failrec (count): %q; want %d matching", out, n)
	}
	began := time.Now()
	out, errOut, code := lcRun(ctx, f, nil, "bulk", "requeue-dead", "--type", "failrec", "--yes", "--wait", "5m")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var opID string
	if len(lines) > 0 {
		if fs := strings.Fields(lines[0]); len(fs) > 1 && fs[0] == "started" {
			opID = fs[1]
		}
	}
	want := fmt.Sprintf("done: %d requeued, 0 failed, of %d matching when confirmed", n, n)
	if code != 0 || opID == "" || !strings.Contains(lines[0], fmt.Sprintf("on %d matching dead letter(s)", n)) || !strings.HasSuffix(lines[len(lines)-1], want) {
		t.Fatalf("bulk requeue-dead --type failrec --yes --wait 5m: exit %d\nstdout:\n%s\nstderr: %s\nwant a started line on %d and a last line ending %q", code, out, errOut, n, want)
	}
	t.Logf("bulk %s finished in %s: %s", opID, time.Since(began).Round(100*time.Millisecond), lines[len(lines)-1])

	// Each task runs once more, dies again, and is back in the poison
	// queue; then nothing more runs.
	waitDead("the deaths after the requeue", 2)
	time.Sleep(3 * time.Second) // a third run would show by now
	runs := fleet.Starts(mustRecords(t, f))
	for _, id := range ids {
		if len(runs[id]) != 2 {
			t.Errorf("%s ran %d times; want 2 (once, then once after the requeue)", id, len(runs[id]))
		}
	}
	if by, total := deadLetters(); total != n || len(by) != n {
		t.Errorf("the poison queue holds %d records of %d tasks at the end: %v; want the %d dead letters again", total, len(by), by, n)
	}
	for _, id := range ids {
		if st, _, err := lcGetStatus(ctx, f, id); err != nil || st.State != "dead" || st.Run == nil || st.Run.Attempts != 1 {
			b, _ := json.Marshal(st)
			t.Errorf("status of %s at the end: %s (%v); want dead after the one attempt of its requeue", id, b, err)
		}
	}

	// The operation's record.
	var b struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Expect   int    `json:"expect"`
		Done     int    `json:"done"`
		Failed   int    `json:"failed"`
		Attempts int    `json:"attempts"`
	}
	if out := lcCLI(ctx, t, f, "bulk", "status", opID, "--json"); json.Unmarshal([]byte(out), &b) != nil || b.State != "succeeded" || b.Expect != n || b.Done != n || b.Failed != 0 {
		t.Errorf("bulk status %s --json: %s; want succeeded, expect %d, done %d, failed 0", opID, out, n, n)
	}
	var list []struct {
		ID   string `json:"id"`
		Done int    `json:"done"`
	}
	if out := lcCLI(ctx, t, f, "bulk", "list", "--json"); json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != opID || list[0].Done != n {
		t.Errorf("bulk list --json: %s; want the one operation %s with done %d", out, opID, n)
	}
	if out := lcCLI(ctx, t, f, "bulk", "list"); !strings.Contains(out, want) {
		t.Errorf("bulk list: %s; want %q", out, want)
	}
}

// mustRecords is f.Records, failing t.
func mustRecords(t *testing.T, f *fleet.Fleet) []fleet.Record {
	t.Helper()
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// runCounts maps each of ids to its number of runs in starts.
func runCounts(starts map[string][]fleet.Record, ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[id] = len(starts[id])
	}
	return out
}

// TestShardsSetOnAFreshAccount: on an account no worker has used yet,
// `leasecron shards` answers (unsharded or sharded configuration alike),
// and `leasecron shards set 8` is refused with a message that says there
// is no shard map yet and to start the workers with shards.count: 8 —
// writing nothing; following that advice, a worker with shards.count 8
// writes the map, and the count can then be changed online. A regression
// test for issue 38: shards set failed on a fresh account with "table not
// found", which told the operator nothing about what to do.
func TestShardsSetOnAFreshAccount(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sharded := []string{"LEASECRON_SHARDS_COUNT=8", "LEASECRON_SHARDS_CYCLE=1s"}

	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"unsharded configuration", nil, "1 shard, moved by the leader"},
		{"shards.count 8", sharded, "8 shards; no traffic cop has shared them out yet"},
	} {
		out, errOut, code := crRunEnv(ctx, f, c.env, "shards")
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("leasecron shards on a fresh account (%s): exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and %q", c.name, code, out, errOut, c.want)
		}
		if out, errOut, code := crRunEnv(ctx, f, c.env, "shards", "--json"); code != 0 || !json.Valid([]byte(out)) {
			t.Errorf("leasecron shards --json on a fresh account (%s): exit %d\nstdout: %s\nstderr: %s", c.name, code, out, errOut)
		}
		out, errOut, code = crRunEnv(ctx, f, c.env, "shards", "set", "8")
		msg := strings.ToLower(errOut)
		if code != 1 || !strings.Contains(msg, "no shard map") || !strings.Contains(msg, "shards.count: 8") ||
			strings.Contains(msg, "table not found") || strings.Contains(msg, "tablenotfound") {
			t.Errorf("leasecron shards set 8 on a fresh account (%s): exit %d\nstdout: %s\nstderr: %s\nwant a refusal (exit 1) saying there is no shard map yet and to start the workers with shards.count: 8", c.name, code, out, errOut)
		} else {
			t.Logf("shards set 8 on a fresh account (%s): exit %d: %s", c.name, code, strings.TrimSpace(errOut))
		}
	}
	// The refusals wrote nothing: still no map.
	if out, errOut, code := crRunEnv(ctx, f, sharded, "shards"); code != 0 || !strings.Contains(out, "no traffic cop has shared them out yet") {
		t.Fatalf("leasecron shards after the refusals: exit %d\n%s\n%s; want still no map", code, out, errOut)
	}

	// The advice works: a worker with shards.count 8 writes the map, and
	// the count can then be changed.
	if _, err := f.StartWorker(sharded...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, code := crRunEnv(ctx, f, sharded, "shards")
		// The first sharded worker writes the map as a change from the
		// one shard an account without a map has: done once every shard
		// is (README "Changing the shard count").
		if code == 0 && strings.Contains(out, "8 shards, shared out by the traffic cop") && !strings.Contains(out, "changing from") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no settled shard map 2 min after a worker with shards.count 8 started: %s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out, errOut, code := crRunEnv(ctx, f, sharded, "shards", "set", "16"); code != 0 || !strings.Contains(out, "placed by 16 shards") {
		t.Fatalf("leasecron shards set 16 once the map exists: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestRollingSwitchToShardingLosesNothing (make test-long, about 3–4 min):
// the middle of the rolling switch to sharding the README describes
// ("Turning sharding on"). A worker with shards.count 8 runs alone until
// the shard map has grown the run records' partitions from 4 to 8 (after
// shard.RunPartsSettle, 2 min); then a worker still on shards.count 1
// joins, and a client with 8 shards schedules 200 tasks due 10–60 s
// ahead, which the sharded worker sends early. Every one of them runs
// exactly once and not early, both workers run some, and no worker
// acknowledges any without running it as "changed since its message was
// sent early". A regression test for issue 38: a worker on one shard
// looked for run records in the first four partitions only, so for an
// early-sent task whose record the sharded mover had written under eight
// it did not find the record's token, took the task for changed and
// dropped it (about 1 in 200 lost).
func TestRollingSwitchToShardingLosesNothing(t *testing.T) {
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	f := startFleet(t, 1, map[string]any{"shards": map[string]any{"count": 8, "cycle": "1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.ConnectionString()},
		Names: leasecron.Names{Shards: 8}})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()

	// The run records' partitions grow with the shards once the new count
	// has been read for RunPartsSettle: wait for it.
	deadline := time.Now().Add(8 * time.Minute)
	for {
		r, err := cl.Shards(ctx)
		if err == nil && r.RunPartitions == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run records never spread over 8 partitions within 8 min: %+v, %v", r, err)
		}
		time.Sleep(time.Second)
	}
	text := lcCLI(ctx, t, f, "shards")
	if !strings.Contains(text, "run records: new ones spread over 8 partitions") && !strings.Contains(text, "run records: spread over 8 partitions") {
		t.Fatalf("leasecron shards once the partitions grew:\n%s", text)
	}
	t.Logf("w1 alone with 8 shards: run records spread over 8 partitions after %s", time.Since(began).Round(time.Second))

	// A worker still on one shard joins, as in a rolling restart.
	w2, err := f.StartWorker("LEASECRON_SHARDS_COUNT=1")
	if err != nil {
		t.Fatal(err)
	}
	waitWorkerUp(ctx, t, f, w2)

	// 200 tasks due 10–60 s ahead, scheduled by a client with 8 shards
	// (the fleet's file says shards.count 8).
	start := time.Now().Add(10 * time.Second)
	dues := map[string]time.Time{}
	var file strings.Builder
	for i := range 200 {
		id := fmt.Sprintf("rs%03d", i)
		due := start.Add(time.Duration(i) * 250 * time.Millisecond).UTC().Truncate(time.Millisecond)
		dues[id] = due
		fmt.Fprintf(&file, `{"id": %q, "type": "rec", "at": %q}`+"\n", id, due.Format(time.RFC3339Nano))
	}
	if out, errOut, code := lcRun(ctx, f, strings.NewReader(file.String()), "schedule", "--file", "-"); code != 0 {
		t.Fatalf("schedule --file: exit %d\n%s\n%s", code, out, errOut)
	}
	if time.Now().After(start) {
		t.Logf("scheduling took until after the first due time: the first tasks were not sent early")
	}

	// Every task runs; a lost one never does, so the wait is bounded by
	// the last due time plus a generous allowance, then the logs say why.
	ids := make([]string, 0, len(dues))
	for id := range dues {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	wctx, wcancel := context.WithDeadline(ctx, start.Add(60*time.Second+3*time.Minute))
	missing, err := f.WaitRecords(wctx, ids)
	wcancel()
	superseded := supersededIn(t, f, ids)
	if err != nil {
		t.Fatalf("%d of 200 tasks never ran: %v; acknowledged without running as changed since sent early: %v", len(missing), missing, superseded)
	}
	time.Sleep(3 * time.Second) // a duplicate would show by now
	starts := fleet.Starts(mustRecords(t, f))
	perWorker := map[string]int{}
	var late []time.Duration
	for _, id := range ids {
		rs := starts[id]
		if len(rs) != 1 {
			t.Errorf("%s ran %d times; want once", id, len(rs))
		}
		for _, r := range rs {
			perWorker[r.Worker]++
			if r.At.Before(dues[id]) {
				t.Errorf("%s started %s before its due time", id, dues[id].Sub(r.At))
			}
		}
		late = append(late, rs[0].At.Sub(dues[id]))
	}
	if len(superseded) != 0 {
		t.Errorf("tasks acknowledged without running as changed since sent early: %v", superseded)
	}
	t.Logf("200 tasks across a sharded and an unsharded worker: runs per worker %v, lateness p50 %s, p99 %s", perWorker,
		fleet.Percentile(late, 50).Round(time.Millisecond), fleet.Percentile(late, 99).Round(time.Millisecond))
	// Without runs on the worker still on one shard, the test shows
	// nothing about it.
	if perWorker[w2] == 0 {
		t.Errorf("%s (shards.count 1) ran none of the tasks: the crossing this test is about never happened", w2)
	}
}

// waitWorkerUp waits until worker name of f has started consuming (its
// log says so); it fails t if the worker exits first or after a minute.
func waitWorkerUp(ctx context.Context, t *testing.T, f *fleet.Fleet, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(filepath.Join(f.Dir, name+".log"))
		if strings.Contains(string(b), "consumer started") {
			return
		}
		select {
		case <-f.Worker(name).Done():
			t.Fatalf("%s exited: %v\n%s", name, f.Worker(name).Err(), b)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s has not started consuming after a minute:\n%s", name, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// crSuperseded is what a worker logs when it acknowledges an early-sent
// message without running it because the task's row no longer carries
// the message's token (README "Early enqueue and failover").
const crSuperseded = "task changed since its message was sent early; acknowledging without running"

// supersededIn returns, by worker, the lines of the workers' logs that
// say a task was acknowledged without running as changed since its
// message was sent early, for any task (ids are named in the message
// when the line names one of them).
func supersededIn(t *testing.T, f *fleet.Fleet, ids []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, name := range f.Names() {
		b, err := os.ReadFile(filepath.Join(f.Dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if !strings.Contains(line, crSuperseded) {
				continue
			}
			which := line
			for _, id := range ids {
				if strings.Contains(line, `"`+id+`"`) || strings.Contains(line, "="+id+" ") {
					which = id
					break
				}
			}
			out[name] = append(out[name], which)
		}
	}
	return out
}

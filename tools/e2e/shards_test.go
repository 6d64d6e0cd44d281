package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// shardConfig is a fleet of 8 shards with a 1 s shard cycle over the
// fleet's 15 s lease, and two work queues.
func shardConfig() map[string]any {
	return map[string]any{"shards": map[string]any{"count": 8, "cycle": "1s"}, "names": map[string]any{"queues": 2}}
}

func shardClient(t *testing.T, f *fleet.Fleet) *leasecron.Client {
	t.Helper()
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
		Names: leasecron.Names{Shards: 8, Queues: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitSettled is fleet.WaitShardsSettled, failing t.
func waitSettled(ctx context.Context, t *testing.T, cl *leasecron.Client, want int) map[string][]string {
	t.Helper()
	owned, err := fleet.WaitShardsSettled(ctx, cl, want)
	if err != nil {
		t.Fatal(err)
	}
	return owned
}

// TestShardsThroughAnOwnerKill: three workers over eight shards. The owner
// of the most shards is SIGKILLed as the first of 60 tasks comes due: its
// shards are all owned again within lease + 2 cycles (the member lease
// lapses; the cop's next cycle sees it; the new owners' next read), the
// tasks it had sent early start on time, the rest are sent early by the
// new owners, so lateness stays within a second; none is lost, none runs
// twice or early. Then a graceful stop hands its shards over within 3 s.
// `leasecron shards` shows the map.
func TestShardsThroughAnOwnerKill(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3, shardConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := shardClient(t, f)
	owned := waitSettled(ctx, t, cl, 3)

	start := time.Now().Add(22 * time.Second)
	var items []leasecron.Item
	for i := range 60 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("sk%02d", i), Type: "rec", Due: start.Add(time.Duration(i) * 500 * time.Millisecond)})
	}
	dues := scheduleAll(ctx, t, cl, items)

	victim := ""
	for m, ss := range owned {
		if victim == "" || len(ss) > len(owned[victim]) || len(ss) == len(owned[victim]) && m < victim {
			victim = m
		}
	}
	time.Sleep(time.Until(start.Add(-500 * time.Millisecond)))
	killed := time.Now()
	f.Signal(victim, syscall.SIGKILL)
	waitSettled(ctx, t, cl, 2)
	took := time.Since(killed)
	t.Logf("SIGKILL of %s (owner of %v): every shard owned again %s later", victim, owned[victim], took.Round(time.Millisecond))
	// lease 15 s + 2 cycles of 1 s, with a second for the poll of this
	// test and a loaded machine.
	if took > 18*time.Second {
		t.Errorf("shards owned again %s after the kill, want within lease + 2 cycles (17 s)", took.Round(time.Millisecond))
	}

	lateness, dups := ranOnTime(ctx, t, f, dues)
	if dups != 0 {
		t.Errorf("%d duplicate runs through the kill", dups)
	}
	p50, p99 := fleet.Percentile(lateness, 50), fleet.Percentile(lateness, 99)
	t.Logf("%d tasks through the kill: lateness p50 %s, p99 %s", len(dues), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	// The early window covers the kill, so tasks are on time; the bound is
	// generous for a loaded 2-core machine, where p99 (of 60: the worst
	// but one) has been 1.28 s (the figures come from the benchmarks).
	// One task may be late by up to the visibility timeout (30 s here):
	// the victim, killed half a second before the first due time, may
	// have taken a message that came into sight up to a second early and
	// died before cutting its invisibility to the due time (README,
	// early enqueue: it happened once in make test).
	late := 0
	for _, l := range lateness {
		switch {
		case l > 33*time.Second:
			t.Errorf("a task %s late, more than the visibility timeout", l.Round(time.Millisecond))
		case l > 3*time.Second:
			late++
		}
	}
	if late > 1 {
		t.Errorf("%d tasks more than 3 s late (p99 %s); want at most the one a killed worker may have held", late, p99.Round(time.Millisecond))
	}

	// A graceful stop hands over at once.
	r, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaving := ""
	for _, s := range r.Shards {
		if s.Owner != victim {
			leaving = s.Owner
		}
	}
	stopped := time.Now()
	if err := f.Worker(leaving).Stop(20 * time.Second); err != nil {
		t.Logf("stop %s: %v", leaving, err)
	}
	waitSettled(ctx, t, cl, 1)
	t.Logf("SIGTERM of %s: its shards owned again %s after it exited", leaving, time.Since(stopped).Round(time.Millisecond))

	out, _, err := f.CLI(ctx, "shards", "--json")
	if err != nil {
		t.Fatalf("leasecron shards --json: %v", err)
	}
	var js struct {
		Count  int `json:"count"`
		Shards []struct {
			Owner string `json:"owner"`
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.Shards) != 8 {
		t.Fatalf("leasecron shards --json: %v\n%s", err, out)
	}
	text, _, err := f.CLI(ctx, "shards")
	if err != nil || !strings.Contains(text, "8 shards, shared out by the traffic cop") {
		t.Errorf("leasecron shards: %v\n%s", err, text)
	}
	t.Logf("leasecron shards:\n%s", text)
}

// TestShardSnippetsAgreeWithTheClient runs the README's Python and Node
// shard functions (testdata/shard.py, shard.mjs, also checked to be the
// README's text) over ids and shard counts, against where the Go client
// puts each task.
func TestShardSnippetsAgreeWithTheClient(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "invoice-42", "report:2026-11", "ünïcödé-id", "x.y_z", "task-0000017", "Z"}
	for _, script := range []struct{ file, start, end, cmd string }{
		{"testdata/shard.py", "def shard(", `return f"{h % shards:02d}"`, "python3"},
		{"testdata/shard.mjs", "function shard(", "return String(h % shards).padStart(2, \"0\");\n}", "node"},
	} {
		src, err := os.ReadFile(script.file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		i, j := strings.Index(s, script.start), strings.Index(s, script.end)
		if i < 0 || j < 0 || !strings.Contains(string(readme), s[i:j+len(script.end)]) {
			t.Errorf("the README does not show %s's function as it is", script.file)
		}
		for _, n := range []int{1, 2, 8, 64, 256} {
			args := append([]string{script.file, fmt.Sprint(n)}, ids...)
			out, err := exec.Command(script.cmd, args...).Output()
			if err != nil {
				t.Fatalf("%s %s: %v", script.cmd, script.file, err)
			}
			got := strings.Fields(string(out))
			for k, id := range ids {
				want := goShard(t, id, n)
				if k >= len(got) || got[k] != want {
					t.Errorf("%s: %q over %d shards: %v, the client puts it in %s", script.file, id, n, got, want)
				}
			}
		}
	}
}

// goShard is the shard the Go client writes id into, with n shards.
func goShard(t *testing.T, id string, n int) string {
	t.Helper()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"},
		Names: leasecron.Names{Shards: n}})
	if err != nil {
		t.Fatal(err)
	}
	return c.ShardOf(id)
}

// longShardFleet starts, for a long test (make test-long; skipped
// otherwise), three workers over 8 shards and waits until they share them;
// it returns the fleet, a context ending after timeout, a client and each
// worker's shards.
func longShardFleet(t *testing.T, timeout time.Duration) (*fleet.Fleet, context.Context, *leasecron.Client, map[string][]string) {
	t.Helper()
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	f := startFleet(t, 3, shardConfig())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cl := shardClient(t, f)
	return f, ctx, cl, waitSettled(ctx, t, cl, 3)
}

// stream schedules a task of type rec every every, due ahead on, with ids
// prefix0000, prefix0001, …, through the client client returns (it may
// change), until the returned stop is called; stop returns the due time
// of every task scheduled.
func stream(ctx context.Context, prefix string, every, ahead time.Duration, client func() *leasecron.Client) (stop func() map[string]time.Time) {
	sctx, cancel := context.WithCancel(ctx)
	dues := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; sctx.Err() == nil; i++ {
			id := fmt.Sprintf("%s%04d", prefix, i)
			due := time.Now().Add(ahead)
			if _, err := client().Schedule(sctx, leasecron.Item{ID: id, Type: "rec", Due: due}, nil); err == nil {
				dues[id] = due
			}
			select {
			case <-sctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() map[string]time.Time {
		cancel()
		<-done
		return dues
	}
}

// TestShardsThroughManyKills (make test-long, about 8 min): 20 times, the
// owner of the most of 8 shards is SIGKILLed and a fresh worker started;
// all its shards are owned again within lease + 2 cycles (15 s + 2 × 1 s)
// at p99, while a steady stream of tasks (one every 0.5 s, due 20 s
// ahead) runs on time, each once.
func TestShardsThroughManyKills(t *testing.T) {
	f, ctx, cl, owned := longShardFleet(t, 20*time.Minute)

	stopStream := stream(ctx, "st", 500*time.Millisecond, 20*time.Second, func() *leasecron.Client { return cl })

	var took []time.Duration
	for k := range 20 {
		victim := ""
		for m, ss := range owned {
			if victim == "" || len(ss) > len(owned[victim]) {
				victim = m
			}
		}
		killed := time.Now()
		f.Signal(victim, syscall.SIGKILL)
		waitSettled(ctx, t, cl, 2)
		took = append(took, time.Since(killed))
		t.Logf("kill %d: %s (%d shards) → owned again in %s", k+1, victim, len(owned[victim]), took[k].Round(time.Millisecond))
		if _, err := f.StartWorker(); err != nil {
			t.Fatal(err)
		}
		owned = waitSettled(ctx, t, cl, 3)
	}
	dues := stopStream()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	p50, p99 := fleet.Percentile(took, 50), fleet.Percentile(took, 99)
	t.Logf("20 kills: shards owned again after p50 %s, p99 %s, max %s", p50.Round(time.Millisecond), p99.Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	if p99 > 18*time.Second {
		t.Errorf("p99 %s, want within lease + 2 cycles (17 s, and a second for this test's polling)", p99.Round(time.Millisecond))
	}

	lateness, dups := ranOnTime(ctx, t, f, dues)
	t.Logf("%d streamed tasks through 20 kills: 0 lost, %d duplicate runs, lateness p50 %s, p99 %s", len(dues), dups,
		fleet.Percentile(lateness, 50).Round(time.Millisecond), fleet.Percentile(lateness, 99).Round(time.Millisecond))
	if p := fleet.Percentile(lateness, 99); p > time.Second {
		t.Errorf("lateness p99 %s, want at most 1 s", p.Round(time.Millisecond))
	}
}

// TestShardOwnershipStable (make test-long, 10 min): three workers over 8
// shards with stable membership make no ownership change at all.
func TestShardOwnershipStable(t *testing.T) {
	_, ctx, cl, _ := longShardFleet(t, 15*time.Minute)
	epochs := func() map[string]int64 {
		r, err := cl.Shards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, s := range r.Shards {
			out[s.Shard] = s.Epoch
		}
		return out
	}
	before := epochs()
	end := time.Now().Add(10 * time.Minute)
	changes := 0
	for time.Now().Before(end) {
		time.Sleep(10 * time.Second)
		for s, e := range epochs() {
			if e != before[s] {
				changes++
				t.Errorf("shard %s changed epoch %d → %d with stable membership", s, before[s], e)
				before[s] = e
			}
		}
	}
	t.Logf("10 minutes of stable membership: %d ownership changes", changes)
}

// TestShardsThroughASIGSTOP: the owner of some of 4 shards is stopped
// (SIGSTOP) for longer than its lease while tasks come due; its shards are
// taken over by storage's verdict (its member lease lapses), the tasks run
// on time through it, and once it resumes it finds its lease lost, stops
// moving and joins again; nothing is lost or run early.
func TestShardsThroughASIGSTOP(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, map[string]any{"shards": map[string]any{"count": 4, "cycle": "1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
		Names: leasecron.Names{Shards: 4}})
	if err != nil {
		t.Fatal(err)
	}
	owned := waitSettled(ctx, t, cl, 2)
	leader, err := f.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := ""
	for m := range owned {
		if m != leader.Holder {
			victim = m
		}
	}
	start := time.Now().Add(5 * time.Second)
	var items []leasecron.Item
	for i := range 40 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("ss%02d", i), Type: "rec", Due: start.Add(time.Duration(i) * 750 * time.Millisecond)})
	}
	dues := scheduleAll(ctx, t, cl, items)
	f.Signal(victim, syscall.SIGSTOP)
	stopped := time.Now()
	waitSettled(ctx, t, cl, 1)
	t.Logf("SIGSTOP of %s (owner of %v): its shards owned by %s %s later", victim, owned[victim], leader.Holder, time.Since(stopped).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	f.Signal(victim, syscall.SIGCONT)
	waitSettled(ctx, t, cl, 2)
	t.Logf("%s resumed and rejoined", victim)

	_, dups := ranOnTime(ctx, t, f, dues)
	t.Logf("40 tasks through a SIGSTOP past the lease: 0 lost, %d duplicate runs", dups)
	log, err := os.ReadFile(filepath.Join(f.Dir, victim+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "lost the member lease") {
		t.Errorf("%s's log does not say it lost its member lease after the SIGSTOP", victim)
	}
}

// ranOnTime waits until every task of dues (id → due time) has run and
// fails the test for a run before its due time; it returns the first
// runs' lateness, sorted, and how many runs were duplicates.
func ranOnTime(ctx context.Context, t *testing.T, f *fleet.Fleet, dues map[string]time.Time) (lateness []time.Duration, dups int) {
	t.Helper()
	want := make([]string, 0, len(dues))
	for id := range dues {
		want = append(want, id)
	}
	sort.Strings(want)
	if missing, err := f.WaitRecords(ctx, want); err != nil {
		t.Fatalf("%d of %d tasks never ran (%v): %v", len(missing), len(want), err, head(missing, 20))
	}
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts := fleet.Starts(rs)
	for _, id := range want {
		r := starts[id]
		dups += len(r) - 1
		for _, x := range r {
			if x.At.Before(dues[id]) {
				t.Errorf("%s started %s before its due time", id, dues[id].Sub(x.At))
			}
		}
		lateness = append(lateness, r[0].At.Sub(dues[id]))
	}
	sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
	return lateness, dups
}

// TestReshardingUnderLoad (make test-long, about 3 min): three workers over
// 8 shards hold 3,000 tasks coming due over 150 s (20 a second, with the
// stream about 27: what this machine's Azurite carries on time, p99 1.2 s
// without a change) while the count goes to 16 and back to 8, and a
// stream of new tasks (one every 100 ms) is scheduled through both
// changes. Nothing is lost, nothing starts early, each task runs once, and
// no shard holds a due task for longer than a cycle (1 s, with a second
// for this test's polling): every shard is moved throughout.
func TestReshardingUnderLoad(t *testing.T) {
	f, ctx, cl, _ := longShardFleet(t, 10*time.Minute)

	dues := map[string]time.Time{}
	start := time.Now().Add(20 * time.Second)
	for b := range 30 {
		var items []leasecron.Item
		for i := range 100 {
			n := b*100 + i
			due := start.Add(time.Duration(n) * 50 * time.Millisecond) // 3,000 over 150 s
			items = append(items, leasecron.Item{ID: fmt.Sprintf("bl%04d", n), Type: "rec", Due: due})
		}
		if _, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			dues[it.ID] = it.Due
		}
	}
	t.Logf("3,000 tasks scheduled, due from %s to %s", start.Format(time.TimeOnly), start.Add(150*time.Second).Format(time.TimeOnly))

	// The watch: the largest lag of any shard, polled throughout.
	watchCtx, stopWatch := context.WithCancel(ctx)
	type lagAt struct {
		lag      time.Duration
		at       time.Time
		due      int
		owner    string
		shards   int
		handover string
	}
	maxLag := map[string]lagAt{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if r, err := cl.Shards(watchCtx); err == nil {
				for _, s := range r.Shards {
					if s.Lag > maxLag[s.Shard].lag {
						maxLag[s.Shard] = lagAt{s.Lag, time.Now(), s.Due, s.Owner, r.MapCount, s.HandingOverFrom}
					}
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	stopStream := stream(ctx, "rs", 100*time.Millisecond, 3*time.Second, func() *leasecron.Client { return cl })

	pointed := func(n int) time.Duration {
		t.Helper()
		t0 := time.Now()
		if err := fleet.WaitShardCount(ctx, cl, n); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	pointed(8)
	time.Sleep(time.Until(start.Add(30 * time.Second))) // under way: tasks coming due
	if err := cl.SetShards(ctx, 16); err != nil {
		t.Fatal(err)
	}
	t.Logf("8 → 16 shards: every shard's tasks findable under 16 after %s", pointed(16).Round(time.Millisecond))
	waitSettled(ctx, t, cl, 3)
	time.Sleep(30 * time.Second)
	if err := cl.SetShards(ctx, 8); err != nil {
		t.Fatal(err)
	}
	t.Logf("16 → 8 shards: every shard's tasks findable under 8 after %s", pointed(8).Round(time.Millisecond))
	time.Sleep(time.Until(start.Add(150*time.Second + 5*time.Second)))
	streamDues := stopStream()
	stopWatch()
	<-watched
	for id, due := range streamDues {
		dues[id] = due
	}

	lateness, dups := ranOnTime(ctx, t, f, dues)
	t.Logf("%d tasks (%d streamed) through 8 → 16 → 8 shards: 0 lost, %d duplicate runs, lateness p50 %s, p99 %s", len(dues), len(streamDues), dups,
		fleet.Percentile(lateness, 50).Round(time.Millisecond), fleet.Percentile(lateness, 99).Round(time.Millisecond))
	if dups != 0 {
		t.Errorf("%d duplicate runs, want each task once", dups)
	}
	worst, at := time.Duration(0), ""
	for s, l := range maxLag {
		if l.lag > worst {
			worst, at = l.lag, s
		}
	}
	w := maxLag[at]
	t.Logf("largest lag of a shard's oldest due task: %s (shard %s at %s: %d due, owner %q, handed over from %q, %d shards) over %d shards",
		worst.Round(time.Millisecond), at, w.at.Format("15:04:05.000"), w.due, w.owner, w.handover, w.shards, len(maxLag))
	// Liveness, so the bound is generous: alone the worst lag is about
	// 0.6 s (a 1 s cycle), but make test-long runs four fleets side by
	// side on two cores, where a cycle over a new owner's five or six
	// shards stretches with Azurite's answers (2.6 s and 3.7 s measured).
	// A shard that no one moves waits out the 15 s lease or more, which
	// 5 s still catches.
	if worst > 5*time.Second {
		t.Errorf("shard %s held a due task for %s: want every shard moved within a few cycles (1 s each; 5 s allowed on a loaded machine)", at, worst.Round(time.Millisecond))
	}
}

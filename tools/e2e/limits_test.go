package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/trafficcop"
)

// TestLimitThreeAcrossFleet: three workers with eight handler slots each
// and `limits.recslow: 3`; 30 one-second recslow tasks. The records must
// never show more than three running at once — and, with 24 free handler
// slots, exactly three at some point — and every task must finish. While
// they run, `stats --json` reports the limit and the slots held.
func TestLimitThreeAcrossFleet(t *testing.T) {
	t.Parallel()
	const limit, n = 3, 30
	f := startFleet(t, 3, map[string]any{
		"worker": map[string]any{"concurrency": 8},
		"limits": map[string]any{"recslow": limit},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	var items []leasecron.Item
	want := map[string]bool{}
	for i := range n {
		it := leasecron.Item{ID: fmt.Sprintf("lim%02d", i), Type: "recslow", Payload: "1", Due: time.Now()}
		items = append(items, it)
		want[it.ID] = true
	}
	began := time.Now()
	scheduleAll(ctx, t, cl, items)

	// Sample stats while the tasks run.
	sctx, stopSampling := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		samples  int
		maxHeld  int
		badStats []string
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			s, err := cliStats(sctx, f)
			if err == nil {
				mu.Lock()
				samples++
				if len(s.Limits) != 1 || s.Limits[0].Type != "recslow" || s.Limits[0].Limit != limit || s.Limits[0].Held > limit {
					badStats = append(badStats, fmt.Sprintf("%+v", s.Limits))
				} else {
					maxHeld = max(maxHeld, s.Limits[0].Held)
				}
				mu.Unlock()
			}
			select {
			case <-sctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()

	wctx, wcancel := context.WithTimeout(ctx, 75*time.Second)
	defer wcancel()
	missing, err := f.WaitEnds(wctx, ids(items))
	stopSampling()
	<-sampled
	if err != nil {
		t.Fatalf("%d of %d tasks never finished (%v): %v", len(missing), n, err, head(missing, 10))
	}
	took := time.Since(began)
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	overlap := maxOverlap(rs, want)
	perWorker := map[string]int{}
	for _, r := range rs {
		if want[r.ID] && r.Phase == "start" {
			perWorker[r.Worker]++
		}
	}
	t.Logf("%d recslow tasks (1 s each, limit %d) finished in %s; max overlap %d; executions per worker %v",
		n, limit, took.Round(time.Millisecond), overlap, perWorker)
	mu.Lock()
	t.Logf("stats --json sampled %d times while running; most slots held seen: %d", samples, maxHeld)
	if len(badStats) > 0 {
		t.Errorf("stats --json showed a wrong limit: %v", badStats)
	}
	if samples == 0 || maxHeld < 1 {
		t.Errorf("stats --json never showed a held slot (%d samples)", samples)
	}
	mu.Unlock()
	if overlap != limit {
		t.Errorf("at most %d recslow tasks ran at once, want exactly %d (never more, and the limit reached)", overlap, limit)
	}
	if took < time.Duration(n/limit)*time.Second {
		t.Errorf("%d one-second tasks under a limit of %d finished in %s: the limit cannot have held", n, limit, took)
	}

	// Stopped workers flush their counters: the deferrals for want of a
	// slot show in stats.
	for _, name := range f.Names() {
		if err := f.Worker(name).Stop(20 * time.Second); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	}
	s, err := cliStats(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after stopping: limits %+v", s.Limits)
	if len(s.Limits) != 1 || s.Limits[0].Held != 0 || s.Limits[0].Deferred == 0 {
		t.Errorf("stats after the run: limits %+v, want recslow with 0 held and some deferrals", s.Limits)
	}
}

// TestLimitSlotsFreedAfterSIGKILL: a worker holding both slots of
// `limits.recslow: 2` (two 30 s tasks) is killed with SIGKILL. Its slots
// must free themselves within the lease duration (15 s in the fleet's
// configuration), and its tasks must then run on another worker.
func TestLimitSlotsFreedAfterSIGKILL(t *testing.T) {
	t.Parallel()
	const limit = 2
	leaseDuration := 15 * time.Second // fleet.BaseConfig's lease.duration
	f := startFleet(t, 1, map[string]any{
		"worker": map[string]any{"visibility_timeout": "10s"},
		"limits": map[string]any{"recslow": limit},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	items := []leasecron.Item{
		{ID: "long0", Type: "recslow", Payload: "30", Due: time.Now()},
		{ID: "long1", Type: "recslow", Payload: "30", Due: time.Now()},
	}
	scheduleAll(ctx, t, cl, items)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if missing, err := f.WaitRecords(wctx, ids(items)); err != nil {
		t.Fatalf("tasks %v never started: %v", missing, err)
	}

	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	sem, err := trafficcop.NewSemaphore(sc.Blob.NewContainerClient("leasecron"), "recslow", limit, trafficcop.SemaphoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := sem.Held(ctx); err != nil || held != limit {
		t.Fatalf("before the kill: %d slots held (err %v), want %d", held, err, limit)
	}
	f.Signal("w1", syscall.SIGKILL)
	killed := time.Now()

	// Nobody else contends for the slots yet, so the first moment both
	// read as free is when their leases expired.
	var freed time.Duration
	for {
		held, err := sem.Held(ctx)
		if err == nil && held == 0 {
			freed = time.Since(killed)
			break
		}
		if time.Since(killed) > leaseDuration+15*time.Second {
			t.Fatalf("slots still held %s after SIGKILL (held %d, err %v)", time.Since(killed).Round(time.Millisecond), held, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slots of the SIGKILLed worker free again %s after the kill (lease duration %s)", freed.Round(time.Millisecond), leaseDuration)
	// Safety: not before the lease could have run out (the last renewal
	// came at most a renewal period, a third of the lease, before the
	// kill). Liveness: soon after it; the bound allows for the 100 ms Held
	// polls, each reading every slot, slowing down on a loaded CI machine.
	if freed < leaseDuration*2/3-time.Second || freed > leaseDuration+4*time.Second {
		t.Errorf("slots freed %s after the kill, want within [lease·2/3 − 1 s, lease + 4 s] (lease %s)", freed.Round(time.Millisecond), leaseDuration)
	}

	// Another worker redoes the tasks.
	w2, err := f.StartWorker()
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 40*time.Second)
	defer rcancel()
	for {
		rs, err := f.Records()
		if err != nil {
			t.Fatal(err)
		}
		redone := map[string]time.Time{}
		for _, r := range rs {
			if r.Phase == "start" && r.Worker == w2 {
				redone[r.ID] = r.At
			}
		}
		if len(redone) == len(items) {
			for _, it := range items {
				t.Logf("%s redone on %s %s after the kill", it.ID, w2, redone[it.ID].Sub(killed).Round(time.Millisecond))
			}
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("tasks not redone on %s: only %v", w2, redone)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if held, err := sem.Held(ctx); err != nil || held != limit {
		t.Errorf("while %s runs them: %d slots held (err %v), want %d", w2, held, err, limit)
	}
	// The killed worker's handler processes died with it (they would
	// otherwise run on, unsupervised, while their tasks run again here).
	if n := handlerShells(f.RecordFile, "w1"); n != 0 {
		t.Errorf("%d handler processes of the SIGKILLed worker w1 are still running", n)
	}
}

// handlerShells counts running exec-handler shells (the `sh -c` of the rec
// handlers) started by the given fleet worker.
func handlerShells(recordFile, worker string) int {
	n := 0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		if !slices.Contains(vars, "FLEET_RECORD="+recordFile) || !slices.Contains(vars, "FLEET_WORKER="+worker) {
			continue
		}
		if comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm")); strings.TrimSpace(string(comm)) == "sh" {
			n++
		}
	}
	return n
}

// TestBackpressure: `queue.max_depth: 20`, `queue.resume_below: 10`, two
// workers running two one-second tasks each, 200 tasks due at once. The
// queue depth, sampled every 200 ms, must never exceed max_depth by more
// than one move batch (100); stats must show the mover holding back while
// the queue is that deep; scheduling must work meanwhile; every task runs.
func TestBackpressure(t *testing.T) {
	t.Parallel()
	const maxDepth, resumeBelow, n, extra = 20, 10, 200, 10
	f := startFleet(t, 2, map[string]any{
		"worker": map[string]any{"concurrency": 2},
		"queue":  map[string]any{"max_depth": maxDepth, "resume_below": resumeBelow},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, err := f.WaitLeader(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// The client knows the fleet's backpressure (as the command does from
	// the same configuration): it sends tasks due now itself only while
	// the queue is below max_depth.
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
		MaxDepth: maxDepth, ResumeBelow: resumeBelow})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	q := sc.Queue.NewQueueClient("leasecron-work")

	// Sample the depth every 200 ms until the test ends.
	sctx, stopSampling := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		maxSeen  int
		nSamples int
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			p, err := q.GetProperties(sctx, nil)
			if err == nil && p.ApproximateMessagesCount != nil {
				mu.Lock()
				maxSeen = max(maxSeen, int(*p.ApproximateMessagesCount))
				nSamples++
				mu.Unlock()
			}
			select {
			case <-sctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	items := make([]leasecron.Item, n)
	due := time.Now()
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("bp%03d", i), Type: "recslow", Payload: "1", Due: due}
	}
	began := time.Now()
	scheduleAll(ctx, t, cl, items)
	t.Logf("scheduled %d tasks in %s", n, time.Since(began).Round(time.Millisecond))

	// Wait until stats shows the mover holding back, then schedule more:
	// scheduling must not be held back.
	var held statsOut
	for {
		s, err := cliStats(ctx, f)
		if err == nil && s.MoverHoldingBack {
			held = s
			break
		}
		if ctx.Err() != nil || time.Since(began) > 30*time.Second {
			t.Fatalf("stats never showed the mover holding back (last %+v, err %v)", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("stats while holding back: queue depth %d, due backlog %d, mover_holding_back %v", held.QueueDepth, held.DueBacklog, held.MoverHoldingBack)
	// stats infers holding back from outside: the queue at max_depth, or
	// still at resume_below or deeper with rows due (the mover's hysteresis).
	// Workers drain the queue between the mover's probe and stats' read, so
	// the depth stats sees may already be below max_depth.
	if held.QueueDepth < resumeBelow {
		t.Errorf("stats showed the mover holding back at depth %d < resume_below %d", held.QueueDepth, resumeBelow)
	}
	if held.DueBacklog == 0 {
		t.Errorf("mover holding back with no due backlog: %+v", held)
	}
	more := make([]leasecron.Item, extra)
	for i := range more {
		more[i] = leasecron.Item{ID: fmt.Sprintf("bpx%02d", i), Type: "rec", Due: time.Now()}
	}
	t0 := time.Now()
	scheduleAll(ctx, t, cl, more)
	t.Logf("scheduled %d more while holding back in %s", extra, time.Since(t0).Round(time.Millisecond))

	wctx, wcancel := context.WithTimeout(ctx, 100*time.Second)
	defer wcancel()
	all := append(ids(items), ids(more)...)
	missing, err := f.WaitRecords(wctx, all)
	stopSampling()
	<-sampled
	if err != nil {
		t.Fatalf("%d of %d tasks never ran (%v): %v", len(missing), len(all), err, head(missing, 10))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("all %d tasks ran in %s; max queue depth observed %d over %d samples (max_depth %d)",
		len(all), time.Since(began).Round(time.Millisecond), maxSeen, nSamples, maxDepth)
	if maxSeen > maxDepth+100 {
		t.Errorf("queue depth reached %d: more than max_depth %d plus one move batch (100)", maxSeen, maxDepth)
	}
	if maxSeen < maxDepth/2 {
		t.Errorf("queue depth never exceeded %d: the sampling saw nothing of the backlog", maxSeen)
	}
	if !logHas(t, f, leader.Holder, "holding back") {
		t.Errorf("leader %s never logged holding back", leader.Holder)
	}
}

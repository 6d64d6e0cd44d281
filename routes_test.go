package leasecron_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// ranLog records which worker ran each task, at which attempt and when.
type ranLog struct {
	mu    sync.Mutex
	by    map[string][]string // task id → workers, one per run
	tries map[string][]int
	at    map[string]time.Time
}

func newRanLog() *ranLog {
	return &ranLog{by: map[string][]string{}, tries: map[string][]int{}, at: map[string]time.Time{}}
}

func (l *ranLog) handler(worker string, d time.Duration) leasecron.Handler {
	return func(ctx context.Context, t leasecron.Task) error {
		l.mu.Lock()
		l.by[t.ID] = append(l.by[t.ID], worker)
		l.tries[t.ID] = append(l.tries[t.ID], t.Attempt)
		if _, ok := l.at[t.ID]; !ok {
			l.at[t.ID] = time.Now()
		}
		l.mu.Unlock()
		if d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

func (l *ranLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by)
}

// poolWorker is a quick worker that handles types, each with h.
func poolWorker(t *testing.T, st leasecron.Storage, names leasecron.Names, id string, routes map[string]leasecron.Route, conc int, h func(worker string) leasecron.Handler, types ...string) *leasecron.Worker {
	t.Helper()
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: id, Routing: leasecron.Routing{Types: routes},
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 500 * time.Millisecond, Concurrency: conc},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range types {
		w.Handle(typ, h(id))
	}
	return w
}

// scheduleNow schedules n tasks of typ due now, ids prefix-0 …
func scheduleNow(ctx context.Context, t *testing.T, cl *leasecron.Client, prefix, typ string, n int) {
	t.Helper()
	items := make([]leasecron.Item, n)
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("%s-%d", prefix, i), Type: typ, Due: time.Now()}
	}
	for chunk := range slices.Chunk(items, 500) {
		res, err := cl.ScheduleMany(ctx, chunk, leasecron.ScheduleManyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// waitRan waits until log has seen n tasks, failing after limit.
func waitRan(t *testing.T, log *ranLog, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for log.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks ran within %v", log.count(), n, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two worker pools on one account, each with its own handlers and its
// type routed to its own named queue: every task runs on a worker of its
// pool, at its first attempt; no worker is handed a task it cannot run.
func TestWorkerPoolsRunOnlyTheirOwnTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, names := testAccount(t)
	routes := map[string]leasecron.Route{"render": {Queue: "gpu"}, "mail": {Queue: "general"}}
	log := newRanLog()
	h := func(id string) leasecron.Handler { return log.handler(id, 0) }
	workers := []*leasecron.Worker{
		poolWorker(t, st, names, "gpu-1", routes, 8, h, "render"),
		poolWorker(t, st, names, "gpu-2", routes, 8, h, "render"),
		poolWorker(t, st, names, "general-1", routes, 8, h, "mail"),
		poolWorker(t, st, names, "general-2", routes, 8, h, "mail"),
	}
	for _, w := range workers {
		defer runWorker(ctx, t, w)()
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: leasecron.Routing{Types: routes}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	scheduleNow(ctx, t, cl, "r", "render", n)
	scheduleNow(ctx, t, cl, "m", "mail", n)
	waitRan(t, log, 2*n, 3*time.Minute)
	log.mu.Lock()
	for id, by := range log.by {
		pool := "gpu-"
		if id[0] == 'm' {
			pool = "general-"
		}
		for i, w := range by {
			if w[:len(pool)] != pool || log.tries[id][i] != 1 {
				t.Errorf("task %s ran on %s at attempt %d; want its own pool (%s*) at attempt 1", id, w, log.tries[id][i], pool)
			}
		}
	}
	log.mu.Unlock()
	var misrouted int64
	for _, w := range workers {
		misrouted += w.ConsumerStats().Total.Misrouted
	}
	if misrouted != 0 {
		t.Errorf("%d deliveries reached a worker without the handler", misrouted)
	}
	dead, err := cl.DeadLetters().List(ctx)
	if err != nil || len(dead) != 0 {
		t.Fatalf("dead letters = %d, %v; want none", len(dead), err)
	}
}

// Two workers with different handlers on one queue (no routes: a fleet
// configured by mistake): a task reaching the worker without its handler
// goes back without an attempt until the other takes it; nothing dies.
func TestMisroutedTasksGoBackWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, names := testAccount(t)
	log := newRanLog()
	h := func(id string) leasecron.Handler { return log.handler(id, 0) }
	wa := poolWorker(t, st, names, "has-a", nil, 8, h, "a")
	wb := poolWorker(t, st, names, "has-b", nil, 8, h, "b")
	defer runWorker(ctx, t, wa)()
	defer runWorker(ctx, t, wb)()
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	scheduleNow(ctx, t, cl, "a", "a", n)
	scheduleNow(ctx, t, cl, "b", "b", n)
	waitRan(t, log, 2*n, 3*time.Minute)
	log.mu.Lock()
	for id, by := range log.by {
		if by[0] != "has-"+id[:1] || log.tries[id][0] != 1 {
			t.Errorf("task %s ran on %v at attempts %v; want has-%s at attempt 1", id, by, log.tries[id], id[:1])
		}
	}
	log.mu.Unlock()
	misrouted := wa.ConsumerStats().Total.Misrouted + wb.ConsumerStats().Total.Misrouted
	t.Logf("%d deliveries went back to the queue from the worker without the handler", misrouted)
	if dead, err := cl.DeadLetters().List(ctx); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters = %d, %v; want none", len(dead), err)
	}
}

// A backlog of low-priority work draining on three workers; critical tasks
// scheduled meanwhile start within moments, long before the backlog has
// drained, instead of waiting behind it.
func TestCriticalTasksJumpTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, names := testAccount(t)
	routes := map[string]leasecron.Route{"bulk": {Priority: leasecron.PriorityLow}}
	log := newRanLog()
	// 3 workers x 4 slots / 200 ms: the backlog takes about 25 s to drain.
	h := func(id string) leasecron.Handler { return log.handler(id, 200*time.Millisecond) }
	for i := range 3 {
		defer runWorker(ctx, t, poolWorker(t, st, names, fmt.Sprintf("w%d", i), routes, 4, h, "bulk", "reset"))()
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: leasecron.Routing{Types: routes}})
	if err != nil {
		t.Fatal(err)
	}
	const backlog, critical = 1500, 50
	scheduleNow(ctx, t, cl, "bulk", "bulk", backlog)
	waitRan(t, log, 100, 2*time.Minute) // the backlog is draining
	asked := map[string]time.Time{}
	for i := range critical {
		id := fmt.Sprintf("reset-%d", i)
		asked[id] = time.Now()
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "reset", Due: time.Now(), Priority: leasecron.PriorityCritical}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log.mu.Lock()
		started := 0
		for id := range asked {
			if _, ok := log.at[id]; ok {
				started++
			}
		}
		bulkDone := len(log.by) - started
		log.mu.Unlock()
		if started == critical {
			if bulkDone >= backlog {
				t.Fatalf("the critical tasks all started only once the backlog of %d had drained", backlog)
			}
			t.Logf("all %d critical tasks started with %d of %d backlog tasks still to run", critical, backlog-bulkDone, backlog)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d critical tasks started within 2m", started, critical)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var waits []time.Duration
	log.mu.Lock()
	for id, t0 := range asked {
		waits = append(waits, log.at[id].Sub(t0))
	}
	log.mu.Unlock()
	slices.Sort(waits)
	p50, p99 := waits[len(waits)/2], waits[len(waits)*99/100]
	t.Logf("critical start latency behind a backlog: p50 %v, p99 %v, max %v", p50.Round(time.Millisecond), p99.Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	// A liveness bound, generous for a loaded machine: a task that waited
	// behind the backlog would wait for most of it (≥ 15 s here).
	if p99 > 5*time.Second {
		t.Fatalf("critical tasks' p99 start latency %v behind a low backlog, want at most 5s", p99)
	}
}

// Fairness: one tenant floods the fleet with tasks, another schedules a
// few a moment later: the second's start within seconds, long before the
// flood has drained, because workers take from the tenants' lanes in turn.
func TestFairKeysShareTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, names := testAccount(t)
	log := newRanLog()
	// 3 workers x 4 slots / 200 ms: the flood takes about 25 s to drain.
	h := func(id string) leasecron.Handler { return log.handler(id, 200*time.Millisecond) }
	for i := range 3 {
		defer runWorker(ctx, t, poolWorker(t, st, names, fmt.Sprintf("w%d", i), nil, 4, h, "job"))()
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	const flood, few = 1500, 50
	items := make([]leasecron.Item, flood)
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("a-%d", i), Type: "job", Due: time.Now(), FairKey: "tenant-a"}
	}
	for chunk := range slices.Chunk(items, 500) {
		if _, err := cl.ScheduleMany(ctx, chunk, leasecron.ScheduleManyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRan(t, log, 50, 2*time.Minute) // the flood is draining
	asked := map[string]time.Time{}
	for i := range few {
		id := fmt.Sprintf("b-%d", i)
		asked[id] = time.Now()
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "job", Due: time.Now(), FairKey: "tenant-b"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log.mu.Lock()
		started := 0
		for id := range asked {
			if _, ok := log.at[id]; ok {
				started++
			}
		}
		floodDone := len(log.by) - started
		log.mu.Unlock()
		if started == few {
			if floodDone >= flood {
				t.Fatalf("tenant-b's tasks all started only once tenant-a's %d had run", flood)
			}
			t.Logf("all %d of tenant-b's tasks started with %d of tenant-a's %d still to run", few, flood-floodDone, flood)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of tenant-b's %d tasks started within 2m", started, few)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var waits []time.Duration
	log.mu.Lock()
	for id, t0 := range asked {
		waits = append(waits, log.at[id].Sub(t0))
	}
	log.mu.Unlock()
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	t.Logf("tenant-b start latency behind tenant-a's flood: p50 %v, p99 %v", waits[len(waits)/2].Round(time.Millisecond), p99.Round(time.Millisecond))
	// Liveness, generous for a loaded machine; first come first served
	// would make them wait for most of the flood (≥ 20 s here).
	if p99 > 10*time.Second {
		t.Fatalf("tenant-b's p99 start latency %v behind tenant-a's flood, want at most 10s", p99)
	}
}

package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/queuesrv"
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

// poolWorker is a quick worker with the routing of routes (and whatever
// mod sets besides) that handles types, each with h.
func poolWorker(t *testing.T, st leasecron.Storage, names leasecron.Names, id string, routes map[string]leasecron.Route, conc int, h func(worker string) leasecron.Handler, types ...string) *leasecron.Worker {
	t.Helper()
	return routedWorker(t, st, names, id, conc, func(o *leasecron.WorkerOptions) { o.Routing.Types = routes }, h, types...)
}

// routedWorker is a quick worker (15 s lease polled every second, mover
// passes and idle polls every 500 ms) with conc handler slots, changed by
// mod, that handles types, each with h.
func routedWorker(t *testing.T, st leasecron.Storage, names leasecron.Names, id string, conc int, mod func(*leasecron.WorkerOptions), h func(worker string) leasecron.Handler, types ...string) *leasecron.Worker {
	t.Helper()
	o := leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: id,
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 500 * time.Millisecond, Concurrency: conc},
	}
	mod(&o)
	w, err := leasecron.NewWorker(o)
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
// (150 tasks of each type in make test; make test-long runs the issue's
// 500 of each.)
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
	n := 150 // the 500 + 500 in make test-long
	if os.Getenv("LEASECRON_LONG") != "" {
		n = 500
	}
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
	// 3 workers x 4 slots / 200 ms: the backlog takes at least 10 s to drain.
	h := func(id string) leasecron.Handler { return log.handler(id, 200*time.Millisecond) }
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: leasecron.Routing{Types: routes}})
	if err != nil {
		t.Fatal(err)
	}
	// The backlog is queued before the workers start: on a loaded machine
	// scheduling it takes long enough for running workers to drain it as
	// it comes.
	const backlog, critical = 600, 20
	scheduleNow(ctx, t, cl, "bulk", "bulk", backlog)
	for i := range 3 {
		defer runWorker(ctx, t, poolWorker(t, st, names, fmt.Sprintf("w%d", i), routes, 4, h, "bulk", "reset"))()
	}
	waitRan(t, log, 50, 2*time.Minute) // the backlog is draining
	asked := map[string]time.Time{}
	for i := range critical {
		id := fmt.Sprintf("reset-%d", i)
		asked[id] = time.Now()
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "reset", Due: time.Now(), Priority: leasecron.PriorityCritical}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p99 := jumpedTheQueue(t, log, asked, backlog, "critical tasks", "the low backlog")
	// jumpedTheQueue checked that none waited behind the backlog, by
	// counting starts; the seconds are only a liveness bound, generous for
	// a loaded machine (the backlog alone takes at least 10 s here, and a
	// CI run saw 5.02 s at p99 with 242 of it still to run).
	if p99 > 15*time.Second {
		t.Fatalf("critical tasks' p99 start latency %v behind a low backlog, want at most 15s", p99)
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
	// 3 workers x 4 slots / 200 ms: the flood takes at least 10 s to drain.
	h := func(id string) leasecron.Handler { return log.handler(id, 200*time.Millisecond) }
	// Tenant A names its key on each task; tenant B's come from a payload
	// field, as a program writing rows would leave them.
	routing := leasecron.Routing{FairKeys: map[string]string{"job": "payload.tenant"}}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: routing})
	if err != nil {
		t.Fatal(err)
	}
	// The flood is queued before the workers start (see
	// TestCriticalTasksJumpTheBacklog).
	const flood, few = 600, 20
	items := make([]leasecron.Item, flood)
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("a-%d", i), Type: "job", Due: time.Now(), FairKey: "tenant-a"}
	}
	for chunk := range slices.Chunk(items, 500) {
		if _, err := cl.ScheduleMany(ctx, chunk, leasecron.ScheduleManyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		defer runWorker(ctx, t, routedWorker(t, st, names, fmt.Sprintf("w%d", i), 4, func(o *leasecron.WorkerOptions) { o.Routing = routing }, h, "job"))()
	}
	byPayload := cl.RouteOf(leasecron.Item{Type: "job", Payload: `{"tenant":"tenant-b"}`})
	if byKey := cl.RouteOf(leasecron.Item{Type: "job", FairKey: "tenant-b"}); byPayload != byKey || byPayload.Lane == cl.RouteOf(leasecron.Item{Type: "job", FairKey: "tenant-a"}).Lane {
		t.Fatalf("tenant-b by payload goes to %v, by key to %v; want the same lane, not tenant-a's", byPayload, byKey)
	}
	waitRan(t, log, 50, 2*time.Minute) // the flood is draining
	asked := map[string]time.Time{}
	for i := range few {
		id := fmt.Sprintf("b-%d", i)
		asked[id] = time.Now()
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "job", Due: time.Now(), Payload: `{"tenant":"tenant-b"}`}, nil); err != nil {
			t.Fatal(err)
		}
	}
	p99 := jumpedTheQueue(t, log, asked, flood, "tenant-b's tasks", "tenant-a's flood")
	// jumpedTheQueue checked that none waited behind the flood, by
	// counting starts; the seconds are only a liveness bound, generous for
	// a loaded machine.
	if p99 > 15*time.Second {
		t.Fatalf("tenant-b's p99 start latency %v behind tenant-a's flood, want at most 15s", p99)
	}
}

// A fair key from the payload must name a payload field; anything else is
// refused by name, for workers and clients alike.
func TestFairKeysOptionRefusesBadValues(t *testing.T) {
	for _, bad := range []string{"customer", "payload.", "unique"} {
		r := leasecron.Routing{FairKeys: map[string]string{"bill": bad}}
		_, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"}, Routing: r})
		if !errors.Is(err, leasecron.ErrInvalidOptions) || !strings.Contains(err.Error(), `Routing.FairKeys["bill"]`) || !strings.Contains(err.Error(), "payload.<field>") {
			t.Errorf("client, FairKeys bill: %q: %v; want ErrInvalidOptions naming the field and payload.<field>", bad, err)
		}
		_, err = leasecron.NewWorker(leasecron.WorkerOptions{Storage: leasecron.Storage{ConnectionString: "UseDevelopmentStorage=true"}, Routing: r})
		if !errors.Is(err, leasecron.ErrInvalidOptions) || !strings.Contains(err.Error(), `WorkerOptions.Routing.FairKeys["bill"]`) {
			t.Errorf("worker, FairKeys bill: %q: %v; want ErrInvalidOptions naming the field", bad, err)
		}
	}
}

// jumpedTheQueue waits until every task of asked (id → when scheduled)
// has started, fails the test if that happened only once the backlog
// tasks (the rest of log) had all run, and returns the p99 of their start
// latencies. It also fails the test if any of them waited behind the
// backlog: a task that jumps it is overtaken by the few backlog tasks
// already in hand when it was scheduled, not by a large share of what
// was still to run. That check counts starts, not seconds, so it holds
// however slowly a loaded machine runs the fleet.
func jumpedTheQueue(t *testing.T, log *ranLog, asked map[string]time.Time, backlog int, what, behind string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log.mu.Lock()
		started := 0
		for id := range asked {
			if _, ok := log.at[id]; ok {
				started++
			}
		}
		backlogDone := len(log.by) - started
		log.mu.Unlock()
		if started == len(asked) {
			if backlogDone >= backlog {
				t.Fatalf("the %s all started only once %s (%d) had run", what, behind, backlog)
			}
			t.Logf("all %d %s started with %d of %s's %d still to run", len(asked), what, backlog-backlogDone, behind, backlog)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s started within 2m", started, len(asked), what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var waits []time.Duration
	worst, worstLeft := 0, 0
	log.mu.Lock()
	for id, t0 := range asked {
		at := log.at[id]
		waits = append(waits, at.Sub(t0))
		overtaken, left := 0, 0
		for other, start := range log.at {
			if _, mine := asked[other]; mine || start.Before(t0) {
				continue
			}
			left++
			if start.Before(at) {
				overtaken++
			}
		}
		left += backlog - (len(log.at) - len(asked))
		if overtaken > worst {
			worst, worstLeft = overtaken, left
		}
		if overtaken > left/3 {
			t.Errorf("%s waited behind %s: %d of the %d still to run when it was scheduled started before it", id, behind, overtaken, left)
		}
	}
	log.mu.Unlock()
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	t.Logf("%s start latency behind %s: p50 %v, p99 %v; at worst %d of the %d then still to run started first", what, behind,
		waits[len(waits)/2].Round(time.Millisecond), p99.Round(time.Millisecond), worst, worstLeft)
	return p99
}

// longTest skips t unless LEASECRON_LONG is set (make test-long), and
// returns an account of t's own: tables and blobs on a private Azurite,
// queues on internal/queuesrv (the Queue service's REST protocol, in
// memory) unless ROUTES_QUEUES=azurite. Azurite keeps all of a queue's
// messages in one collection that every get and delete scans, so behind
// a backlog of thousands each queue request takes it tens of
// milliseconds and the fleet runs at the emulator's pace (about 10 tasks
// a second here); Azure serves the same requests in constant time, which
// queuesrv stands in for. ROUTES_QUEUES=azurite measures on Azurite's
// queues: the tests log the same figures and hold only liveness bounds.
func longTest(t *testing.T) (leasecron.Storage, leasecron.Names) {
	t.Helper()
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	srv := azuritetest.StartWith(t, azurite.Options{InMemory: true})
	switch q := os.Getenv("ROUTES_QUEUES"); q {
	case "azurite":
		t.Log("queues on Azurite (ROUTES_QUEUES=azurite)")
		return leasecron.Storage{ConnectionString: srv.ConnectionString()}, leasecron.Names{}
	case "", "memory":
	default:
		t.Fatalf("ROUTES_QUEUES=%q: want memory (the default: queues on internal/queuesrv) or azurite", q)
	}
	qs, err := queuesrv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qs.Close() })
	t.Log("tables and blobs on Azurite, queues on internal/queuesrv (ROUTES_QUEUES=azurite for Azurite's)")
	blob, _, table := srv.Ports()
	return leasecron.Storage{ConnectionString: azurite.ConnectionString("127.0.0.1", blob, qs.Port(), table)}, leasecron.Names{}
}

// onAzuriteQueues reports whether the long tests' queues are Azurite's
// (ROUTES_QUEUES=azurite), where the latency targets are logged,
// not held (see longTest).
func onAzuriteQueues() bool { return os.Getenv("ROUTES_QUEUES") == "azurite" }

// The sizes (make test-long): a backlog of 10,000 priority-4
// tasks draining on three workers; 50 priority-1 tasks scheduled for now
// one by one meanwhile start long before the backlog has drained (the
// issue asks for 1 s at p99: measured and logged).
func TestPrioritiesAtScale(t *testing.T) {
	st, names := longTest(t)
	ctx := context.Background()
	// As a user would configure it: the urgent type's level is in the
	// configuration, so it is drained from the start (a level only tasks
	// name is found by listing, within about a second on busy workers).
	routes := map[string]leasecron.Route{"bulk": {Priority: leasecron.PriorityLow}, "reset": {Priority: leasecron.PriorityCritical}}
	log := newRanLog()
	h := func(id string) leasecron.Handler { return log.handler(id, 100*time.Millisecond) }
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: leasecron.Routing{Types: routes}})
	if err != nil {
		t.Fatal(err)
	}
	// The backlog is in the queue before the workers start (scheduling
	// 10,000 takes Azurite a while; workers running meanwhile would
	// drain it as it comes).
	const backlog, critical = 10000, 50
	scheduleNow(ctx, t, cl, "bulk", "bulk", backlog)
	for i := range 3 {
		defer runWorker(ctx, t, poolWorker(t, st, names, fmt.Sprintf("w%d", i), routes, 8, h, "bulk", "reset"))()
	}
	waitRan(t, log, 200, 5*time.Minute)
	// Latency from the moment Schedule returned (the task is scheduled)
	// to the start; the Schedule call itself, on an Azurite this busy, is
	// logged beside it.
	asked, scheduled := map[string]time.Time{}, map[string]time.Time{}
	var calls []time.Duration
	for i := range critical {
		id := fmt.Sprintf("reset-%d", i)
		asked[id] = time.Now()
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "reset", Due: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		scheduled[id] = time.Now()
		calls = append(calls, scheduled[id].Sub(asked[id]))
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(calls)
	t.Logf("Schedule calls meanwhile: p50 %v, p99 %v", calls[len(calls)/2].Round(time.Millisecond), calls[len(calls)*99/100].Round(time.Millisecond))
	p99 := jumpedTheQueue(t, log, scheduled, backlog, "critical tasks", "the low backlog")
	// The 1 s at p99. On Azurite's queues (ROUTES_QUEUES=azurite)
	// each queue request behind this backlog takes a good part of that
	// (see the Schedule calls above), so there it is logged and only a
	// liveness bound is held: without priorities they would wait for most
	// of the backlog (minutes).
	switch {
	case !onAzuriteQueues() && p99 > time.Second:
		t.Errorf("critical tasks' p99 start latency %v behind 10,000 low ones, want at most 1s", p99)
	case p99 > 5*time.Second:
		t.Errorf("critical tasks' p99 start latency %v behind 10,000 low ones on Azurite's queues, want at most 5s", p99)
	case p99 > time.Second:
		t.Logf("critical tasks' p99 %v is over the issue's 1 s on Azurite's queues", p99)
	}
}

// Weighted priorities on Azurite: two levels backed up, weights 3:1
// (priority 1 and 4 of worker.priority_weights 3,1,1,1): over a minute
// the low level gets a quarter of the starts (±10 %), where strict
// priorities would give it none.
func TestWeightedPrioritiesShareAtScale(t *testing.T) {
	st, names := longTest(t)
	ctx := context.Background()
	routes := map[string]leasecron.Route{"hi": {Priority: leasecron.PriorityCritical}, "lo": {Priority: leasecron.PriorityLow}}
	log := newRanLog()
	// 3 workers x 8 slots / 400 ms: at most 60 starts a second, so neither
	// level's 5,000 drains within the minute measured.
	h := func(id string) leasecron.Handler { return log.handler(id, 400*time.Millisecond) }
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: leasecron.Routing{Types: routes}})
	if err != nil {
		t.Fatal(err)
	}
	scheduleNow(ctx, t, cl, "lo", "lo", 5000)
	scheduleNow(ctx, t, cl, "hi", "hi", 5000)
	for i := range 3 {
		defer runWorker(ctx, t, routedWorker(t, st, names, fmt.Sprintf("w%d", i), 8, func(o *leasecron.WorkerOptions) {
			o.Routing.Types, o.PriorityWeights = routes, []int{3, 1, 1, 1}
		}, h, "hi", "lo"))()
	}
	shares := windowShares(t, log, 200, time.Minute)
	lo := float64(shares["l"]) / float64(shares["l"]+shares["h"])
	t.Logf("over a minute with both levels backed up: %d high, %d low starts: low share %.3f (weights 3:1 → 0.25)", shares["h"], shares["l"], lo)
	if lo < 0.225 || lo > 0.275 {
		t.Errorf("the low level's share of starts is %.3f, want 0.25 ± 10%%", lo)
	}
}

// windowShares waits until skip tasks have started, then counts the
// starts of the next window by the first letter of their ids.
func windowShares(t *testing.T, log *ranLog, skip int, window time.Duration) map[string]int {
	t.Helper()
	waitRan(t, log, skip, 5*time.Minute)
	from := time.Now()
	time.Sleep(window)
	to := time.Now()
	out := map[string]int{}
	log.mu.Lock()
	defer log.mu.Unlock()
	for id, at := range log.at {
		if !at.Before(from) && at.Before(to) {
			out[id[:1]]++
		}
	}
	return out
}

// The fairness sizes (make test-long): tenant A schedules 5,000
// tasks at once, tenant B 50 a second later, equal weights, three
// workers: B's start within 5 s (p99) while A's backlog takes over a
// minute; then with weights 3:1 (tenant C weighted 3 against D) the
// shares of starts over a minute are 3:1 (±10 %).
func TestFairnessAtScale(t *testing.T) {
	st, names := longTest(t)
	ctx := context.Background()
	routing := leasecron.Routing{FairWeights: map[string]int{"tenant-c": 3}}
	log := newRanLog()
	// 3 workers x 4 slots / 200 ms: at most 60 starts a second, so A's
	// 5,000 take over a minute, and C's and D's 4,000 each outlast the
	// minute their shares are measured over.
	h := func(id string) leasecron.Handler { return log.handler(id, 200*time.Millisecond) }
	startWorkers := func() (stop func()) {
		var stops []func()
		for i := range 3 {
			stops = append(stops, runWorker(ctx, t, routedWorker(t, st, names, fmt.Sprintf("w%d", i), 4, func(o *leasecron.WorkerOptions) { o.Routing = routing }, h, "job")))
		}
		return func() {
			for _, s := range stops {
				s()
			}
		}
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Routing: routing})
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(prefix, key string, n int) {
		items := make([]leasecron.Item, n)
		for i := range items {
			items[i] = leasecron.Item{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "job", Due: time.Now(), FairKey: key}
		}
		for chunk := range slices.Chunk(items, 500) {
			if _, err := cl.ScheduleMany(ctx, chunk, leasecron.ScheduleManyOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Tenant A's 5,000 are in the queue before the workers start (they
	// would drain them as Azurite takes them in otherwise); B's follow a
	// second after the workers start.
	keyed("a", "tenant-a", 5000)
	began := time.Now()
	stop := startWorkers()
	time.Sleep(time.Second)
	// B's 50 at once (one ScheduleMany, which sends them as it goes),
	// timed from the call.
	bs := make([]leasecron.Item, 50)
	for i := range bs {
		bs[i] = leasecron.Item{ID: fmt.Sprintf("b-%d", i), Type: "job", Due: time.Now(), FairKey: "tenant-b"}
	}
	asked, call := map[string]time.Time{}, time.Now()
	for _, it := range bs {
		asked[it.ID] = call
	}
	if _, err := cl.ScheduleMany(ctx, bs, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("ScheduleMany of tenant-b's 50 took %v", time.Since(call).Round(time.Millisecond))
	p99 := jumpedTheQueue(t, log, asked, 5000, "tenant-b's tasks", "tenant-a's backlog")
	// What fairness promises whatever the storage's speed: while B had
	// tasks waiting, B got its share of the starts (equal weights: half).
	// The latency follows from the share and the fleet's rate, which on
	// Azurite on two cores is the emulator's (see the log).
	first, last, b, all := firstLast(log, "b-")
	rate := float64(all) / max(last.Sub(first).Seconds(), 0.001)
	share := float64(b) / float64(max(all, 1))
	t.Logf("between tenant-b's first and last start (%v): %d of %d starts were tenant-b's (%.2f; fleet %.1f tasks/s)",
		last.Sub(first).Round(time.Millisecond), b, all, share, rate)
	if share < 0.4 || share > 0.6 {
		t.Errorf("tenant-b had %.2f of the starts while its tasks waited, want 0.5 (equal weights) ± 0.1", share)
	}
	if p99 > 5*time.Second {
		msg := fmt.Sprintf("tenant-b's p99 start latency %v is over the 5 s the issue asks for: at %.1f tasks/s its half of the fleet runs 50 tasks in %.1f s", p99, rate, 100/max(rate, 0.001))
		if onAzuriteQueues() {
			t.Log(msg)
		} else {
			t.Error(msg)
		}
	}
	waitRan(t, log, 5050, 10*time.Minute)
	drain := time.Since(began)
	t.Logf("tenant-a's 5,000 drained in %v", drain.Round(time.Second))
	if drain < time.Minute {
		t.Errorf("tenant-a's backlog drained in %v: the measurement wants it to take at least a minute", drain)
	}
	// Weights: C (3) against D (1), both backed up: the workers stop while
	// they are scheduled, so that both lanes are full when workers take
	// them again (else the workers would keep C's lane empty as Azurite
	// takes them in).
	stop()
	var mix []leasecron.Item
	for i := range 4000 {
		for _, k := range []string{"c", "d"} {
			mix = append(mix, leasecron.Item{ID: fmt.Sprintf("%s-%d", k, i), Type: "job", Due: time.Now(), FairKey: "tenant-" + k})
		}
	}
	for chunk := range slices.Chunk(mix, 500) {
		if _, err := cl.ScheduleMany(ctx, chunk, leasecron.ScheduleManyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer startWorkers()()
	shares := windowShares(t, log, 5050+200, time.Minute)
	ratio := float64(shares["c"]) / float64(max(shares["d"], 1))
	t.Logf("over a minute with both backed up: tenant-c %d, tenant-d %d starts: %.2f (weights 3:1)", shares["c"], shares["d"], ratio)
	if ratio < 2.7 || ratio > 3.3 {
		t.Errorf("tenant-c:tenant-d = %.2f over a minute, want 3 ± 10%%", ratio)
	}
}

// firstLast returns the first and last start of the tasks whose ids start
// with prefix, how many of those there were, and how many tasks of any id
// started between those two moments.
func firstLast(log *ranLog, prefix string) (first, last time.Time, n, all int) {
	log.mu.Lock()
	defer log.mu.Unlock()
	for id, at := range log.at {
		if strings.HasPrefix(id, prefix) {
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
	}
	for id, at := range log.at {
		if !at.Before(first) && !at.After(last) {
			all++
			if strings.HasPrefix(id, prefix) {
				n++
			}
		}
	}
	return first, last, n, all
}

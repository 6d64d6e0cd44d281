package blackboard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// azClients returns a fresh set of clients (its own HTTP pipeline) for the
// shared Azurite.
func azClients(t *testing.T) *storage.Clients {
	t.Helper()
	srv := azuritetest.Shared(t)
	c, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func azStore(t *testing.T, c *storage.Clients, table string) *tableStore {
	t.Helper()
	s, err := newTableStore(c.Table, table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTableStoreOnAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testStore(t, ctx, azStore(t, azClients(t), azuritetest.Name(t, "t")))
}

func TestBoardOnAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := azClients(t)
	table := azuritetest.Name(t, "t")
	b, err := NewBoard(c.Table, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	testBoard(t, ctx, b, azStore(t, c, table))
	if _, err := NewBoard(c.Table, "no-such_table!"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewBoard(bad table) = %v", err)
	}
}

// invocation is one handler call as the handler saw it.
type invocation struct {
	key, worker string
	due         time.Time // the claim's Start (Task.Due)
	begin, end  time.Time
}

type invocationLog struct {
	mu  sync.Mutex
	all []invocation
}

func (l *invocationLog) add(i invocation) {
	l.mu.Lock()
	l.all = append(l.all, i)
	l.mu.Unlock()
}

func (l *invocationLog) byKey() map[string][]invocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string][]invocation{}
	for _, i := range l.all {
		m[i.key] = append(m[i.key], i)
	}
	for _, list := range m {
		sort.Slice(list, func(a, b int) bool { return list[a].due.Before(list[b].due) })
	}
	return m
}

// recordingHandler records every call and works for a short random time.
func recordingHandler(log *invocationLog, worker string) Handlers {
	return func(typ string) (leasecrontype.Handler, bool) {
		if typ != "rec" {
			return nil, false
		}
		return func(ctx context.Context, task leasecrontype.Task) error {
			inv := invocation{key: task.Key, worker: worker, due: task.Due, begin: time.Now()}
			select {
			case <-time.After(time.Duration(20+rand.IntN(40)) * time.Millisecond):
			case <-ctx.Done():
			}
			inv.end = time.Now()
			log.add(inv)
			return nil
		}, true
	}
}

// checkNoOverlap verifies that no two invocations of a key overlapped and
// that consecutive starts are at least interval apart; it returns the
// largest gap between consecutive starts.
func checkNoOverlap(t *testing.T, key string, invs []invocation, interval time.Duration) time.Duration {
	t.Helper()
	var maxGap time.Duration
	for i := 1; i < len(invs); i++ {
		prev, cur := invs[i-1], invs[i]
		if cur.begin.Before(prev.end) {
			t.Errorf("key %s: invocation by %s began at %v before the one by %s ended at %v (double claim)",
				key, cur.worker, cur.begin.Format("15:04:05.000"), prev.worker, prev.end.Format("15:04:05.000"))
		}
		gap := cur.due.Sub(prev.due)
		if gap < interval {
			t.Errorf("key %s: starts %v apart (%s then %s), less than the interval %v", key, gap, prev.worker, cur.worker, interval)
		}
		maxGap = max(maxGap, gap)
	}
	return maxGap
}

func TestThreeWorkersShareTwentyKeysOnAzurite(t *testing.T) {
	t.Parallel()
	const (
		keys     = 20
		interval = 2 * time.Second
		cycle    = 500 * time.Millisecond
		runFor   = 8 * time.Second // four intervals
	)
	table := azuritetest.Name(t, "t")
	admin := azClients(t)
	b, err := NewBoard(admin.Table, table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if err := b.Add(ctx, Entry{Key: fmt.Sprintf("city%02d", i), Interval: interval, Type: "rec"}, nil); err != nil {
			t.Fatal(err)
		}
	}

	var (
		log       invocationLog
		conflicts atomic.Int64
		cycles    atomic.Int64
		mu        sync.Mutex
		reports   []RunReport
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range 3 {
		id := fmt.Sprintf("w%d", i)
		w, err := NewWorker(azClients(t).Table, Options{
			Settings: Settings{Cycle: cycle},
			Table:    table, InstanceID: id, Logger: quiet,
			Handlers: recordingHandler(&log, id),
			Hooks: Hooks{
				OnCycle: func(c CycleReport) { conflicts.Add(int64(c.Conflicts)); cycles.Add(1) },
				OnRun:   func(r RunReport) { mu.Lock(); reports = append(reports, r); mu.Unlock() },
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := w.Run(runCtx); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(runFor)
	stop()
	wg.Wait()
	elapsed := time.Since(began)

	perWorker := map[string]int{}
	var worstGap time.Duration
	total := 0
	byKey := log.byKey()
	if len(byKey) != keys {
		t.Fatalf("%d keys ran, want %d", len(byKey), keys)
	}
	windows := map[int]int{} // starts per (key, interval window) -> how many windows
	for key, invs := range byKey {
		worstGap = max(worstGap, checkNoOverlap(t, key, invs, interval))
		perWindow := map[int]int{}
		for _, inv := range invs {
			perWindow[int(inv.due.Sub(began)/interval)]++
		}
		for w := 0; w < int(elapsed/interval); w++ {
			windows[perWindow[w]]++
			if perWindow[w] > 1 {
				t.Errorf("key %s started %d times in interval window %d", key, perWindow[w], w)
			}
		}
		// Every key ran once per interval: at least floor(elapsed/(interval+cycle+slack)) times.
		if len(invs) < 3 {
			t.Errorf("key %s ran %d times in %v, want at least 3", key, len(invs), elapsed)
		}
		for _, inv := range invs {
			perWorker[inv.worker]++
		}
		total += len(invs)
	}
	// A due key waits at most one jittered cycle for a walk, plus the
	// handlers queued before it in that walk (up to 0.84 s in ten CI runs);
	// a key that missed an interval would show a gap of two (4 s).
	if limit := interval + cycle*11/10 + 1200*time.Millisecond; worstGap > limit {
		t.Errorf("largest gap between starts %v exceeds %v: a key missed its interval", worstGap, limit)
	}
	if len(perWorker) < 2 {
		t.Errorf("work was not spread: %v", perWorker)
	}
	mu.Lock()
	for _, r := range reports {
		if !r.Recorded {
			t.Errorf("run %s by %s not recorded: %v", r.TaskID, r.Worker, r.RecordErr)
		}
	}
	nReports := len(reports)
	mu.Unlock()
	if nReports != total {
		t.Errorf("%d run reports, %d invocations", nReports, total)
	}
	// The board agrees: no key left running, Runs equals invocations.
	rows, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		if e.Running || e.Runs != int64(len(byKey[e.Key])) {
			t.Errorf("row %s: running %v, runs %d, invocations %d", e.Key, e.Running, e.Runs, len(byKey[e.Key]))
		}
	}
	t.Logf("%d runs of %d keys in %v by %v; largest start gap %v (interval %v, cycle %v); %d cycles, %d claim conflicts; windows by starts %v",
		total, keys, elapsed.Round(time.Millisecond), perWorker, worstGap.Round(time.Millisecond), interval, cycle, cycles.Load(), conflicts.Load(), windows)
}

// killableStore simulates a crashed process: after kill, every call fails
// as if the worker had vanished from the network.
type killableStore struct {
	Store
	dead atomic.Bool
}

var errKilled = errors.New("worker killed")

func (k *killableStore) Get(ctx context.Context, key string) (Entry, error) {
	if k.dead.Load() {
		return Entry{}, errKilled
	}
	return k.Store.Get(ctx, key)
}
func (k *killableStore) List(ctx context.Context) ([]Entry, error) {
	if k.dead.Load() {
		return nil, errKilled
	}
	return k.Store.List(ctx)
}
func (k *killableStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if k.dead.Load() {
		return "", errKilled
	}
	return k.Store.Replace(ctx, e, ifMatch)
}

func TestCrashedWorkerKeyIsTakenOverOnAzurite(t *testing.T) {
	t.Parallel()
	const lockTTL = 1500 * time.Millisecond
	table := azuritetest.Name(t, "t")
	admin := azClients(t)
	b, err := NewBoard(admin.Table, table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := b.Add(ctx, Entry{Key: fmt.Sprintf("town%d", i), Interval: 2 * time.Second, Type: "rec"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The victim's interval is long: it runs again only because its first
	// run was abandoned.
	if err := b.Add(ctx, Entry{Key: "victim", Interval: time.Minute, Type: "victim"}, nil); err != nil {
		t.Fatal(err)
	}

	var (
		log        invocationLog
		victimRuns invocationLog
		first      atomic.Bool
		crashed    = make(chan int, 1)
		mu         sync.Mutex
		reports    []RunReport
	)
	stores := make([]*killableStore, 3)
	cancels := make([]context.CancelFunc, 3)
	ids := make([]string, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		ids[i] = fmt.Sprintf("w%d", i)
		stores[i] = &killableStore{Store: azStore(t, azClients(t), table)}
		rec := recordingHandler(&log, ids[i])
		handlers := func(typ string) (leasecrontype.Handler, bool) {
			if typ != "victim" {
				return rec(typ)
			}
			return func(ctx context.Context, task leasecrontype.Task) error {
				inv := invocation{key: task.Key, worker: ids[i], due: task.Due, begin: time.Now()}
				if first.CompareAndSwap(false, true) {
					crashed <- i
					<-ctx.Done() // hangs until its process "dies"
				} else {
					time.Sleep(30 * time.Millisecond)
				}
				inv.end = time.Now()
				victimRuns.add(inv)
				return nil
			}, true
		}
		w, err := NewWorkerWithStore(stores[i], Options{
			Settings: Settings{Cycle: 300 * time.Millisecond, LockTTL: lockTTL}, InstanceID: ids[i], Logger: quiet, Handlers: handlers,
			Hooks: Hooks{OnRun: func(r RunReport) { mu.Lock(); reports = append(reports, r); mu.Unlock() }},
		})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		cancels[i] = wcancel
		wg.Go(func() { _ = w.Run(wctx) })
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}()

	var victim int
	select {
	case victim = <-crashed:
	case <-ctx.Done():
		t.Fatal("the victim key never ran")
	}
	// Let it heartbeat a few times, then kill it mid-key.
	time.Sleep(lockTTL)
	before, err := b.Get(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if !before.Running || before.Worker != ids[victim] || !before.LockedUntil.After(before.ClaimedAt.Add(lockTTL)) {
		t.Fatalf("victim row before the crash %+v: want running, heartbeats extending LockedUntil", before)
	}
	killedAt := time.Now()
	stores[victim].dead.Store(true)
	cancels[victim]()

	var after Entry
	for {
		if after, err = b.Get(ctx, "victim"); err != nil {
			t.Fatal(err)
		}
		if !after.Running && after.Stop.After(killedAt) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("victim never taken over; row %+v", after)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after.Worker == ids[victim] || after.LastError != "" || after.Runs != 2 {
		t.Fatalf("victim row after takeover %+v", after)
	}
	runs := victimRuns.byKey()["victim"]
	if len(runs) != 2 {
		t.Fatalf("victim ran %d times, want 2: %+v", len(runs), runs)
	}
	crash, takeover := runs[0], runs[1]
	if takeover.begin.Before(crash.end) {
		t.Errorf("takeover began %v before the crashed run ended %v", takeover.begin, crash.end)
	}
	if takeover.due.Before(before.LockedUntil) {
		t.Errorf("taken over at %v, before the lock expired at %v", takeover.due, before.LockedUntil)
	}
	// A run's report comes after its row is written: wait for both
	// reports of the victim (CI met the takeover's not yet made).
	var takeoverReport, crashReport *RunReport
	for {
		mu.Lock()
		for i := range reports {
			if reports[i].Key == "victim" {
				r := reports[i]
				if r.TakenOver {
					takeoverReport = &r
				} else {
					crashReport = &r
				}
			}
		}
		mu.Unlock()
		if takeoverReport != nil && crashReport != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if takeoverReport == nil || takeoverReport.TakenFrom != ids[victim] || !takeoverReport.Recorded {
		t.Fatalf("takeover report %+v", takeoverReport)
	}
	if crashReport == nil || crashReport.Recorded || !errors.Is(crashReport.RecordErr, errKilled) {
		t.Fatalf("crashed worker's report %+v: it must not have recorded", crashReport)
	}
	// The survivors kept the other keys going, never overlapping.
	for key, invs := range log.byKey() {
		checkNoOverlap(t, key, invs, 2*time.Second)
		if last := invs[len(invs)-1]; !last.begin.After(killedAt) || last.worker == ids[victim] {
			t.Errorf("key %s not run by a survivor after the crash (last %+v)", key, last)
		}
	}
	t.Logf("killed %s at +0; lock expired at %v; taken over by %s at %v, completed at %v",
		ids[victim], before.LockedUntil.Sub(killedAt).Round(time.Millisecond), takeover.worker,
		takeover.due.Sub(killedAt).Round(time.Millisecond), after.Stop.Sub(killedAt).Round(time.Millisecond))
}

func TestStaleOwnerCannotOverwriteOnAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := azStore(t, azClients(t), azuritetest.Name(t, "t"))
	r := &recorder{}
	started, release := blocking(r)
	runs := make(chan RunReport, 1)
	w := newWorker(t, s, nil, r, func(o *Options) { o.Hooks.OnRun = func(rr RunReport) { runs <- rr } })
	addKey(t, s, "networksierra", time.Hour)
	done := make(chan struct{})
	go func() { _, _ = w.RunOnce(ctx); close(done) }()
	<-started
	intrude(t, s, "networksierra", "other", time.Now())
	// An operator's RunNow on top of the new owner's claim must survive too.
	if err := NewBoardWithStore(s).RunNow(ctx, "networksierra"); err != nil {
		t.Fatal(err)
	}
	release <- nil
	<-done
	rr := <-runs
	if rr.Recorded || !errors.Is(rr.RecordErr, ErrClaimLost) {
		t.Fatalf("stale owner's report %+v", rr)
	}
	e := get(t, s, "networksierra")
	if !e.Running || e.Worker != "other" || e.ClaimID != "intruder-claim" || !e.Stop.IsZero() || !e.RunNow {
		t.Fatalf("new owner's row was overwritten: %+v", e)
	}
}

package leasecron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// shardedFleet is in-process workers of one sharded schedule.
type shardedFleet struct {
	t     *testing.T
	st    leasecron.Storage
	names leasecron.Names
	mu    sync.Mutex
	ran   map[string]int
	at    map[string]time.Time // when each task started (its first run)
	cycle time.Duration
	w     map[string]*leasecron.Worker
	stop  map[string]func()
}

func newShardedFleet(t *testing.T, shards int) *shardedFleet {
	st, names := testAccount(t)
	names.Shards = shards
	return &shardedFleet{t: t, st: st, names: names, ran: map[string]int{}, at: map[string]time.Time{}, cycle: 200 * time.Millisecond, w: map[string]*leasecron.Worker{}, stop: map[string]func(){}}
}

// skewed is a clock off by a fixed amount (its monotonic reading kept).
type skewed struct{ by time.Duration }

func (s skewed) Now() time.Time { return time.Now().Add(s.by) }
func (s skewed) NewTimer(d time.Duration) leasecrontype.Timer {
	return clock.Real{}.NewTimer(d)
}

func (f *shardedFleet) start(id string) { f.startWith(id, nil) }

// startWith starts a worker with clk (nil: the real clock).
func (f *shardedFleet) startWith(id string, clk leasecrontype.Clock) {
	f.t.Helper()
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: f.st, Names: f.names, InstanceID: id, ShardCycle: f.cycle, Clock: clk,
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 500 * time.Millisecond},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 300 * time.Millisecond},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	w.Handle("t", func(ctx context.Context, task leasecron.Task) error {
		f.mu.Lock()
		f.ran[task.ID]++
		if _, ok := f.at[task.ID]; !ok {
			f.at[task.ID] = time.Now()
		}
		f.mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	f.mu.Lock()
	f.w[id] = w
	f.stop[id] = func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("worker %s: %v", id, err)
		}
	}
	f.mu.Unlock()
	f.t.Cleanup(func() {
		f.mu.Lock()
		stop := f.stop[id]
		delete(f.stop, id)
		f.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
}

func (f *shardedFleet) halt(id string) {
	f.mu.Lock()
	stop := f.stop[id]
	delete(f.stop, id)
	delete(f.w, id)
	f.mu.Unlock()
	stop()
}

// shares returns how many shards each running worker moves, sorted.
func (f *shardedFleet) shares() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, w := range f.w {
		out = append(out, len(w.OwnedShards()))
	}
	slices.Sort(out)
	return out
}

func (f *shardedFleet) waitShares(want ...int) {
	f.t.Helper()
	defer func(t0 time.Time) { f.t.Logf("shares %v after %v", want, time.Since(t0).Round(time.Millisecond)) }(time.Now())
	deadline := time.Now().Add(time.Minute)
	for !slices.Equal(f.shares(), want) {
		if time.Now().After(deadline) {
			f.t.Fatalf("shares %v, want %v", f.shares(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *shardedFleet) waitRan(ids []string) {
	f.t.Helper()
	defer func(t0 time.Time) { f.t.Logf("%d ran after %v", len(ids), time.Since(t0).Round(time.Millisecond)) }(time.Now())
	deadline := time.Now().Add(2 * time.Minute)
	for {
		f.mu.Lock()
		missing := 0
		for _, id := range ids {
			if f.ran[id] == 0 {
				missing++
			}
		}
		f.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d of %d tasks never ran", missing, len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestShardedFleetSharesAndHandsOver runs three workers over eight shards,
// one of them with a clock 10 s ahead (ownership is decided by storage,
// never by comparing clocks): they share them 3/3/2, every task runs
// (each once: nothing here makes a duplicate legitimate but a handover,
// and none happens while tasks are due), a fourth joining takes at most
// ceil(8/4) shards, a stopping worker's shards go to the others, and no
// shard's mover was ever fenced (two movers of one shard at once).
func TestShardedFleetSharesAndHandsOver(t *testing.T) {
	t.Parallel()
	f := newShardedFleet(t, 8)
	f.names.Queues = 3 // and three work queues
	f.start("a")
	f.start("b")
	f.startWith("c", skewed{10 * time.Second})
	f.waitShares(2, 3, 3)

	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names, SendWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	items := make([]leasecron.Item, 120)
	for i := range items {
		id := fmt.Sprintf("task-%03d", i)
		ids = append(ids, id)
		items[i] = leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Duration(i%4) * time.Second)}
	}
	res, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f.waitRan(ids)
	f.mu.Lock()
	for id, n := range f.ran {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	f.mu.Unlock()

	// Handovers under a stream of tasks due a second ahead: the shards
	// that move have rows to commit while they move.
	streamCtx, stopStream := context.WithCancel(ctx)
	var more []string
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		for i := 0; streamCtx.Err() == nil; i++ {
			id := fmt.Sprintf("after-%03d", i)
			if _, err := c.Schedule(streamCtx, leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Second)}, nil); err == nil {
				more = append(more, id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	f.start("d")
	f.waitShares(2, 2, 2, 2)
	f.halt("b")
	f.waitShares(2, 3, 3)
	time.Sleep(time.Second)
	stopStream()
	<-streamed
	t.Logf("%d tasks scheduled through the handovers", len(more))
	f.waitRan(more)
	// The three work queues (messages go to them in turn) are all drained.
	qsvc, err := azqueue.NewServiceClientFromConnectionString(f.st.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A handler that has run has yet to have its message deleted, and a
	// second message of a task (sent again by the shard's next mover after
	// a handover) that met its run's claim is put back until the claim
	// ends, up to the visibility timeout and a backoff's jitter (the last
	// CI run met one): give them that long.
	for _, name := range queue.QueueNames(f.names.Queue, 3) {
		deadline := time.Now().Add(queue.DefaultVisibilityTimeout + 2*queue.DefaultBackoffBase + 15*time.Second)
		for {
			props, err := qsvc.NewQueueClient(name).GetProperties(ctx, nil)
			if err == nil && props.ApproximateMessagesCount != nil && *props.ApproximateMessagesCount == 0 {
				break
			}
			if time.Now().After(deadline) {
				n := int32(-1)
				if err == nil && props.ApproximateMessagesCount != nil {
					n = *props.ApproximateMessagesCount
				}
				t.Errorf("work queue %s: %d messages, %v; want it there and drained", name, n, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range more {
		if n := f.ran[id]; n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	for id, w := range f.w {
		if ms, ok := w.MoverStats(); ok && ms.Fenced != 0 {
			t.Errorf("worker %s: %d of its shard movers were fenced: two movers of a shard acted at once", id, ms.Fenced)
		}
	}
}

// idleFleet starts one worker over n shards (each cycle given) and
// returns once every shard is quiet.
func idleFleet(t *testing.T, n int, cycle time.Duration) *shardedFleet {
	f := newShardedFleet(t, n)
	f.cycle = cycle
	f.start("solo")
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := c.Shards(ctx)
		quiet := 0
		if err == nil {
			for _, s := range r.Shards {
				if s.Quiet && s.Owner == "solo" {
					quiet++
				}
			}
		}
		// A new fleet's map records a change from one shard: its owner
		// makes the tasks findable under the new count some seconds in,
		// one write a shard, and the traffic cop then ends the change.
		// That is not what an idle worker costs, so wait it out.
		if quiet == n && err == nil && r.PrevCount == 0 {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d shards quiet after two minutes (shard change from %d shards still under way: %v)", quiet, n, r.PrevCount, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// idleRates returns the storage requests per second of each fleet's
// worker, all measured over the same window once their shards are quiet:
// fleets measured one after the other would each see another load of a
// shared machine (CI's slow 64-shard window against a fast 2-shard one,
// or the other way round, is the machine, not the shards).
func idleRates(t *testing.T, fs ...*shardedFleet) []float64 {
	t.Helper()
	time.Sleep(3 * time.Second) // past the grace of the last shard to go quiet
	ws := make([]*leasecron.Worker, len(fs))
	before := make([]leasecron.RequestCounts, len(fs))
	for i, f := range fs {
		f.mu.Lock()
		ws[i] = f.w["solo"]
		f.mu.Unlock()
		before[i] = ws[i].Requests()
	}
	start := time.Now()
	time.Sleep(6 * time.Second)
	took := time.Since(start)
	rates := make([]float64, len(fs))
	for i, w := range ws {
		d := w.Requests().Sub(before[i])
		rates[i] = float64(d.Total) / took.Seconds()
		t.Logf("%d shards, quiet: %.1f requests/s (%v)", fs[i].names.Shards, rates[i], d.ByOp)
	}
	return rates
}

// TestQuietShardsCostNothingEach: an idle worker's request rate does not
// grow with its shards: each quiet shard costs nothing a cycle but its
// turn in the one look a cycle; and that look finds a row written without
// a wake.
func TestQuietShardsCostNothingEach(t *testing.T) {
	t.Parallel()
	f := idleFleet(t, 2, 200*time.Millisecond)
	f64 := idleFleet(t, 64, 200*time.Millisecond)
	r := idleRates(t, f, f64)
	if r[1] > r[0]*1.15+0.5 {
		t.Errorf("quiet: %.1f requests/s with 64 shards against %.1f with 2", r[1], r[0])
	}
	unwokenRowRuns(t, f, 2*200*time.Millisecond)
}

// unwokenRowRuns writes a row as another language would (no wake) into
// a quiet shard of f and checks that its owner's round-robin look, one
// quiet shard a cycle, finds it within every (shards × cycle).
func unwokenRowRuns(t *testing.T, f *shardedFleet, every time.Duration) {
	t.Helper()
	ctx := context.Background()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := storage.New(storage.Config{ConnectionString: f.st.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Second)
	rk, err := schedule.RowKey(due, "unwoken")
	if err != nil {
		t.Fatal(err)
	}
	row, _ := json.Marshal(map[string]string{"PartitionKey": c.ShardOf("unwoken"), "RowKey": rk, "Type": "t", "Message": ""})
	if _, err := sc.Table.NewClient(f.names.ScheduleTable).AddEntity(ctx, row, nil); err != nil {
		t.Fatal(err)
	}
	f.waitRan([]string{"unwoken"})
	f.mu.Lock()
	late := f.at["unwoken"].Sub(due)
	f.mu.Unlock()
	t.Logf("the row written without a wake started %s after its due time", late.Round(time.Millisecond))
	if late < 0 || late > every+10*time.Second {
		t.Errorf("the row written without a wake started %s after its due time; the round-robin look comes to its shard every %s", late.Round(time.Millisecond), every)
	}
}

// TestQuietShardsWakeForNewTasks: with 64 quiet shards and a 500 ms cycle
// the round-robin look comes to a shard every 32 s, but a task scheduled
// into a quiet shard wakes its owner, so it starts on time.
func TestQuietShardsWakeForNewTasks(t *testing.T) {
	t.Parallel()
	f := idleFleet(t, 64, 500*time.Millisecond)
	// The client leaves every task to the movers (SendWithin −1).
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names, SendWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dues := map[string]time.Time{}
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("woken-%d", i)
		due := time.Now().Add(3 * time.Second)
		if _, err := c.Schedule(ctx, leasecron.Item{ID: id, Type: "t", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
		dues[id] = due
		ids = append(ids, id)
		time.Sleep(700 * time.Millisecond) // past the client's map TTL: each reads the map again
	}
	f.waitRan(ids)
	f.mu.Lock()
	for _, id := range ids {
		late := f.at[id].Sub(dues[id])
		t.Logf("%s started %s after its due time", id, late.Round(time.Millisecond))
		// Woken, a task starts within tens of milliseconds of its due time;
		// unwoken, it waits for the round-robin look (every 32 s here). The
		// bound is generous for a loaded machine: six tasks all within it
		// by the look alone would be a one-in-a-thousand chance.
		if late < 0 || late > 10*time.Second {
			t.Errorf("%s started %s after its due time; a woken owner moves it on time", id, late.Round(time.Millisecond))
		}
	}
	f.mu.Unlock()
}

// waitPointed waits until the shard count is n and no change is under way.
func waitPointed(t *testing.T, c *leasecron.Client, n int) leasecron.ShardReport {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.Shards(context.Background())
		if err == nil && r.MapCount == n && r.PrevCount == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shard count never settled at %d: %+v, %v", n, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestShardCountChangesOnline: tasks scheduled by an unsharded fleet stay
// findable by id (status, a duplicate refused, cancel, reschedule) after
// the fleet is sharded, and after the count grows from 4 to 8 and shrinks
// to 3 under the running fleet; they all run, from whichever shard holds
// them, and new tasks run too.
func TestShardCountChangesOnline(t *testing.T) {
	t.Parallel()
	f := newShardedFleet(t, 1)
	ctx := context.Background()
	old, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("legacy-%02d", i)
		if _, err := old.Schedule(ctx, leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	f.names.Shards = 4
	f.start("a")
	f.start("b")
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names, SendWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		before := c.Requests().Total
		for _, id := range ids {
			if _, err := c.Get(ctx, id); err != nil {
				t.Fatalf("%s: %s is not found: %v", stage, id, err)
			}
		}
		// By id, not by scanning: the index row where the id belongs now,
		// a pointer's target, the task's row, and now and then the map.
		t.Logf("%s: %d requests for %d lookups", stage, c.Requests().Total-before, len(ids))
		if n := c.Requests().Total - before; n > int64(len(ids))*3+10 {
			t.Errorf("%s: %d requests to find %d tasks by id", stage, n, len(ids))
		}
		if _, err := c.Schedule(ctx, leasecron.Item{ID: ids[0], Type: "t", Due: time.Now().Add(time.Hour)}, nil); !errors.Is(err, leasecron.ErrAlreadyScheduled) {
			t.Fatalf("%s: a second %s: %v, want ErrAlreadyScheduled", stage, ids[0], err)
		}
	}
	// Findable at once (the previous count is looked at), and after the
	// owners have written their pointers.
	check("sharding an unsharded schedule")
	waitPointed(t, c, 4)
	check("sharded in 4")

	// More tasks, placed by 4 shards: after the change to 8 half of them
	// belong in shards 04–07, and a scan would reach them last.
	for i := range 30 {
		id := fmt.Sprintf("four-%02d", i)
		if _, err := c.Schedule(ctx, leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A client still on one shard (the README's rolling switch changes
	// the clients last, one at a time) places and finds tasks by the map
	// as the sharded ones do (issue 38, seed 1356: it looked in "00" only,
	// so it could not find these, and it took unique keys that sharded
	// clients held).
	for _, id := range ids[30:] {
		if _, err := old.Get(ctx, id); err != nil {
			t.Fatalf("an unsharded client: %s is not found: %v", id, err)
		}
	}
	for i := range 8 {
		id := fmt.Sprintf("one-%02d", i)
		if _, err := old.Schedule(ctx, leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id) // found by c in check
	}
	for i := range 4 {
		u := &leasecron.ScheduleOptions{Unique: &leasecron.Unique{Key: fmt.Sprintf("key-%d", i)}}
		held, err := c.Schedule(ctx, leasecron.Item{Type: "t", Due: time.Now().Add(time.Hour)}, u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := old.Schedule(ctx, leasecron.Item{Type: "t", Due: time.Now().Add(time.Hour)}, u)
		if !errors.Is(err, leasecron.ErrDuplicate) || got.ID != held.ID {
			t.Fatalf("an unsharded client scheduling key-%d, held by %s: %s, %v; want ErrDuplicate naming the holder", i, held.ID, got.ID, err)
		}
		ids = append(ids, held.ID)
	}
	if err := c.SetShards(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if err := c.SetShards(ctx, 5); err == nil {
		t.Fatal("a second change while the first is applied was accepted")
	}
	check("changing to 8")
	r := waitPointed(t, c, 8)
	check("sharded in 8")
	if r.Span != 8 {
		t.Fatalf("span %d after growing to 8", r.Span)
	}
	if err := c.SetShards(ctx, 3); err != nil {
		t.Fatal(err)
	}
	r = waitPointed(t, c, 3)
	check("shrunk to 3")
	if r.Span != 8 || len(r.Shards) != 8 {
		t.Fatalf("after shrinking to 3: span %d, %d shards listed; the 8 that may hold tasks stay owned", r.Span, len(r.Shards))
	}
	for _, s := range r.Shards {
		if s.Owner == "" {
			t.Errorf("shard %s has no owner after shrinking", s.Shard)
		}
	}

	// Every legacy task runs from where it sits: half rescheduled to now,
	// the other half cancelled; new ones run as well.
	var run []string
	for i, id := range ids {
		if i%2 == 0 {
			if _, err := c.Reschedule(ctx, id, time.Now()); err != nil {
				t.Fatalf("reschedule %s: %v", id, err)
			}
			run = append(run, id)
		} else if _, err := c.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("new-%02d", i)
		if _, err := c.Schedule(ctx, leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Second)}, nil); err != nil {
			t.Fatal(err)
		}
		run = append(run, id)
	}
	f.waitRan(run)
	// An id whose task ran (its pointer now points at nothing) can be
	// scheduled again.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: ids[0], Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatalf("scheduling %s again after it ran: %v", ids[0], err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, id := range ids {
		if n := f.ran[id]; i%2 == 1 && n != 0 || i%2 == 0 && n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
}

// TestRunRecordsSpreadWithTheShards: when the shard count grows past four,
// so do the run records' partitions (after every process has read the new
// count): records written before and after are found by id, listed, and
// new ones land in the new partitions.
func TestRunRecordsSpreadWithTheShards(t *testing.T) {
	leasecron.SetRunPartsSettle(t, 1500*time.Millisecond) // not parallel: it sets a package variable
	f := newShardedFleet(t, 2)
	f.start("a")
	f.start("b")
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	schedule := func(prefix string) []string { return scheduleDueNow(t, f, c, prefix, 40) }
	partitions := func(want int) { t.Helper(); waitRunPartitions(t, c, want) }
	partitions(4)
	before := schedule("before")
	waitPointed(t, c, 2)
	if err := c.SetShards(ctx, 8); err != nil {
		t.Fatal(err)
	}
	partitions(8)
	time.Sleep(time.Second) // every worker's owner has read the map since (200 ms cycle)
	after := schedule("after")

	for _, id := range append(before, after...) {
		waitSucceeded(t, c, id)
	}
	page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 200})
	if err != nil || len(page.Runs) != 80 {
		t.Fatalf("listing: %d runs, %v; want 80", len(page.Runs), err)
	}
	// The records of the later tasks are spread over eight partitions.
	if pks := runPartitionsOf(t, f, "after"); len(pks) != 8 {
		t.Fatalf("the 40 later run records are in partitions %v; want all eight", pks)
	}
	// A process that is not sharded — a worker or client still on
	// shards.count 1 in the middle of the rolling switch the README
	// describes — finds them too (issue 38: it looked in the first four
	// partitions only, and a worker acknowledged early-sent tasks whose
	// records it could not find without running them).
	unshardedFinds(t, f, after)
}

// scheduleDueNow schedules n tasks due now, ids prefix-00 on, and waits
// until each has run.
func scheduleDueNow(t *testing.T, f *shardedFleet, c *leasecron.Client, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		if _, err := c.Schedule(context.Background(), leasecron.Item{ID: id, Type: "t", Due: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	f.waitRan(ids)
	return ids
}

// waitRunPartitions waits until the shard map says run records are
// written under want partitions.
func waitRunPartitions(t *testing.T, c *leasecron.Client, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.Shards(context.Background())
		if err == nil && r.RunPartitions == want && len(r.RunPartitionsRead) > 0 {
			t.Logf("run records: written under %d, read from %v", r.RunPartitions, r.RunPartitionsRead)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run partitions %d (%v), %v; want %d", r.RunPartitions, r.RunPartitionsRead, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runPartitionsOf counts the run rows of the ids starting with prefix+"-"
// by partition, read straight from the table: records, not the pointer
// rows a record written while a grown count settles leaves under it.
func runPartitionsOf(t *testing.T, f *shardedFleet, prefix string) map[string]int {
	t.Helper()
	sc, err := storage.New(storage.Config{ConnectionString: f.st.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	pks := map[string]int{}
	filter := fmt.Sprintf("RowKey ge 'r~%s-' and RowKey lt 'r~%s.'", prefix, prefix)
	pager := sc.Table.NewClient(f.names.RunsTable).NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr(filter), Select: to.Ptr("PartitionKey,State")})
	for pager.More() {
		p, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entities {
			var row struct{ PartitionKey, State string }
			if err := json.Unmarshal(e, &row); err != nil {
				t.Fatal(err)
			}
			if row.State != "" {
				pks[row.PartitionKey]++
			}
		}
	}
	return pks
}

// unshardedFinds checks that a client on shards.count 1 finds the
// succeeded runs of ids.
func unshardedFinds(t *testing.T, f *shardedFleet, ids []string) {
	t.Helper()
	n1 := f.names
	n1.Shards = 1
	c1, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: n1})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, err := c1.Status(context.Background(), id); err != nil || st.State() != "succeeded" {
			t.Fatalf("an unsharded client's status of %s: %q, %v; want succeeded", id, st.State(), err)
		}
	}
}

// runRecordCosts checks README's costs of the run records of f's tasks ids
// (all ended), in requests to the run-records table, on a client of its
// own whose first use is left out: `status` is one point read, and a page
// of `runs` one query per partition (parts of them).
func runRecordCosts(t *testing.T, f *shardedFleet, ids []string, parts int) {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64
	st := f.st
	st.Transport = countRequests{next: http.DefaultClient, to: "/" + f.names.RunsTable, n: &n}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: f.names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	n.Store(0)
	if s, err := c.Status(ctx, ids[1]); err != nil || s.Run == nil || n.Load() != 1 {
		t.Fatalf("status of %s: %+v, %v, in %d requests to the run records; want its run in one point read", ids[1], s.Run, err, n.Load())
	}
	n.Store(0)
	if page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 100}); err != nil || len(page.Runs) != len(ids) || n.Load() != int64(parts) {
		t.Fatalf("a page of runs: %d runs, %v, in %d requests; want %d runs in one query per partition, %d", len(page.Runs), err, n.Load(), len(ids), parts)
	}
}

// countRequests counts the requests whose URL path, past the account,
// begins with to (a table's name) and goes on with "(" or "?" or ends.
type countRequests struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	to string
	n  *atomic.Int64
}

func (c countRequests) Do(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	if i := strings.Index(p[1:], "/"); i >= 0 {
		p = p[i+1:] // the account's segment (Azurite's path-style URLs)
	}
	if rest, ok := strings.CutPrefix(p, c.to); ok && (rest == "" || rest[0] == '(' || rest[0] == '?') {
		c.n.Add(1)
	}
	return c.next.Do(req)
}

// TestRunRecordsSizedForTheFleetFromTheStart (issue 41): on a fresh
// account the first worker records, before it creates the run-records
// table, eight partitions per work queue, so a fleet of four queues
// spreads its records over 32 from its first task instead of four for
// the minutes a grown count takes to settle. On an account whose table
// an earlier release created, the records stay where they are and the
// sharded fleet grows the count to the same 32 through the settling,
// from the default four or from the four a queue recorded before
// 2026-12-07.
func TestRunRecordsSizedForTheFleetFromTheStart(t *testing.T) {
	leasecron.SetRunPartsSettle(t, 1500*time.Millisecond) // not parallel: it sets a package variable
	ctx := context.Background()
	// fourQueues is a fleet of four work queues and a client of it (made
	// without a storage request: the test sets up what it needs first).
	fourQueues := func(t *testing.T, shards int) (*shardedFleet, *leasecron.Client) {
		f := newShardedFleet(t, shards)
		f.names.Queues = 4
		c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: f.st, Names: f.names})
		if err != nil {
			t.Fatal(err)
		}
		return f, c
	}
	schedule := func(f *shardedFleet, c *leasecron.Client, prefix string) []string {
		ids := scheduleDueNow(t, f, c, prefix, 48)
		for _, id := range ids {
			waitSucceeded(t, c, id)
		}
		return ids
	}
	t.Run("fresh", func(t *testing.T) {
		f, c := fourQueues(t, 2)
		f.start("a")
		waitRunPartitions(t, c, 32)
		if r, _ := c.Shards(ctx); !slices.Equal(r.RunPartitionsRead, []int{32}) {
			t.Fatalf("a fresh account reads run records from %v; want [32] alone", r.RunPartitionsRead)
		}
		ids := schedule(f, c, "fresh")
		if pks := runPartitionsOf(t, f, "fresh"); len(pks) < 17 {
			t.Fatalf("48 run records of a fresh 4-queue fleet are in partitions %v; want them over more than sixteen of 32", pks)
		}
		if page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 100}); err != nil || len(page.Runs) != len(ids) {
			t.Fatalf("listing: %d runs, %v; want %d", len(page.Runs), err, len(ids))
		}
		runRecordCosts(t, f, ids, 32)
		unshardedFinds(t, f, ids)
	})
	t.Run("a client first", func(t *testing.T) {
		// A client's first use of run records creates the table: it
		// records the count first, as a worker does, and the worker
		// started afterwards writes under it (a review: the client made
		// the table, and the count was recorded after it).
		f, c := fourQueues(t, 2)
		if _, err := c.Status(ctx, "nothing-yet"); !errors.Is(err, leasecron.ErrNotFound) {
			t.Fatalf("status before any task: %v; want not found", err)
		}
		waitRunPartitions(t, c, 32)
		f.start("a")
		ids := schedule(f, c, "client-first")
		if pks := runPartitionsOf(t, f, "client-first"); len(pks) < 17 {
			t.Fatalf("48 run records of a 4-queue fleet are in partitions %v; want them over more than sixteen of 32", pks)
		}
		unshardedFinds(t, f, ids)
	})
	t.Run("unsharded", func(t *testing.T) {
		// Unsharded, every task passes through one schedule partition,
		// which four record partitions match: the records stay in four
		// whatever the queues, and a page of them costs four queries.
		f, c := fourQueues(t, 1)
		f.start("a")
		waitRunPartitions(t, c, 4)
		ids := schedule(f, c, "unsharded")
		if pks := runPartitionsOf(t, f, "unsharded"); !slices.Equal(slices.Sorted(maps.Keys(pks)), []string{"p0", "p1", "p2", "p3"}) {
			t.Fatalf("48 run records of an unsharded 4-queue fleet are in partitions %v; want p0..p3", pks)
		}
		if page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 100}); err != nil || len(page.Runs) != len(ids) {
			t.Fatalf("listing: %d runs, %v; want %d", len(page.Runs), err, len(ids))
		}
		runRecordCosts(t, f, ids, 4)
	})
	t.Run("table made by an earlier release", func(t *testing.T) {
		f, c := fourQueues(t, 2)
		sc, err := storage.New(storage.Config{ConnectionString: f.st.ConnectionString})
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.EnsureTable(ctx, f.names.RunsTable); err != nil {
			t.Fatal(err)
		}
		f.start("a")
		waitRunPartitions(t, c, 32) // through Next, after the settling
		if r, _ := c.Shards(ctx); !slices.Equal(r.RunPartitionsRead, []int{4, 32}) {
			t.Fatalf("an account with a table already read from %v; want [4 32]", r.RunPartitionsRead)
		}
		ids := schedule(f, c, "grown")
		unshardedFinds(t, f, ids)
	})
	t.Run("sized at four a queue", func(t *testing.T) {
		// Until 2026-12-07 the first worker recorded four partitions a
		// work queue: the records stay where they are, and the count
		// grows to eight a queue through the settling.
		f, c := fourQueues(t, 2)
		sc, err := storage.New(storage.Config{ConnectionString: f.st.ConnectionString})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{f.names.ScheduleTable, f.names.RunsTable} {
			if err := sc.EnsureTable(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		// What such a first worker wrote before it made the table.
		row, _ := json.Marshal(map[string]string{"PartitionKey": shard.Partition, "RowKey": shard.MapRow, shard.PropRunParts: "16"})
		if _, err := sc.Table.NewClient(f.names.ScheduleTable).AddEntity(ctx, row, nil); err != nil {
			t.Fatal(err)
		}
		// Settling long enough for a batch to run under the old count:
		// its records stay where they are and are found after the growth.
		leasecron.SetRunPartsSettle(t, 20*time.Second)
		f.start("a")
		before := schedule(f, c, "before")
		if r, _ := c.Shards(ctx); r.RunPartitions != 16 {
			t.Fatalf("the batch before the growth ran under %d partitions (%v); want 16, the count growing to 32 still settling", r.RunPartitions, r.RunPartitionsRead)
		}
		for pk := range runPartitionsOf(t, f, "before") {
			if n, _ := strconv.Atoi(strings.TrimPrefix(pk, "p")); n >= 16 {
				t.Fatalf("a record of the batch before the growth is in %s; want p0..p15", pk)
			}
		}
		waitRunPartitions(t, c, 32)
		if r, _ := c.Shards(ctx); !slices.Equal(r.RunPartitionsRead, []int{16, 32}) {
			t.Fatalf("an account sized at 16 read from %v; want [16 32]", r.RunPartitionsRead)
		}
		ids := schedule(f, c, "regrown")
		if page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 200}); err != nil || len(page.Runs) != len(before)+len(ids) {
			t.Fatalf("listing: %d runs, %v; want %d", len(page.Runs), err, len(before)+len(ids))
		}
		unshardedFinds(t, f, append(before, ids...))
	})
}

// waitSucceeded waits until id's run is recorded succeeded.
func waitSucceeded(t *testing.T, c *leasecron.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(context.Background(), id)
		if err == nil && st.State() == "succeeded" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s: %q, %v; want succeeded", id, st.State(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

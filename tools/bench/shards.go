package main

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/throttle"
)

// The sharding scenario's scaled-down storage targets and worker size:
// every worker runs shardsConcurrency handlers of shardsWork each, so an
// instance handles at most shardsConcurrency/shardsWork tasks a second,
// and Azurite's one thread stays well below what it can serve.
const (
	shardsQueueRate     = 40  // message requests per second per queue
	shardsPartitionRate = 200 // entity operations per second per table partition (a batch of 100 must fit)
	shardsConcurrency   = 1   // handlers per worker
	shardsWork          = 150 * time.Millisecond
)

// runShards is the scaling scenario: a backlog of due tasks drained by 1,
// 2 and 4 in-process workers through a proxy that answers 503 ServerBusy,
// as Azure does, past a per-queue message rate and a per-partition entity
// rate (scaled down), once with today's single-lease layout (one shard,
// one queue) and once sharded (8 shards, 4 queues).
func runShards(ctx context.Context, b *bench) error {
	res := results.Shards{QueueRate: shardsQueueRate, PartitionRate: shardsPartitionRate,
		Concurrency: shardsConcurrency, WorkMillis: shardsWork.Milliseconds()}
	for _, design := range []struct {
		name           string
		shards, queues int
	}{{"single lease", 1, 1}, {"sharded", 8, 4}, {shardsRouted, 8, 4}} {
		for _, n := range b.s.instances {
			c, err := b.shardsCase(ctx, design.name, design.shards, design.queues, n)
			if err != nil {
				return err
			}
			b.logf("shards", "%s, %d instances: %d tasks in %.1f s, %.1f tasks/s, %d refused (queue %d, partition %d)",
				c.Design, c.Instances, c.Tasks, c.Seconds, c.PerSecond, c.Refused, c.QueueRefused, c.PartitionRefused)
			res.Cases = append(res.Cases, c)
		}
	}
	return results.Write(b.out, results.ShardsFile, res)
}

// shardsRouted is the sharded design with every task at one of the four
// priority levels and one of eight tenants' fair keys (issue 39: what
// priorities and fairness cost in throughput).
const shardsRouted = "sharded, priorities and fair keys"

func (b *bench) shardsCase(ctx context.Context, design string, shards, queues, instances int) (results.ShardsCase, error) {
	c := results.ShardsCase{Design: design, Shards: shards, Queues: queues, Instances: instances, Tasks: b.s.shardsTasks}
	d, err := b.drain(ctx, drainSpec{routed: design == shardsRouted, shards: shards, queues: queues, instances: instances, tasks: c.Tasks,
		concurrency: shardsConcurrency, work: shardsWork, limits: throttle.Limits{QueueMessages: shardsQueueRate, PartitionEntities: shardsPartitionRate}})
	if err != nil {
		return c, fmt.Errorf("%s, %d instances: %w", design, instances, err)
	}
	c.Seconds, c.PerSecond = d.seconds, float64(c.Tasks)/d.seconds
	c.Requests, c.Refused, c.QueueRefused, c.PartitionRefused = d.stats.Requests, d.stats.Refused, d.stats.QueueLimit, d.stats.PartitionLimit
	return c, nil
}

// drainSpec is one drain of a backlog through the throttling proxy.
type drainSpec struct {
	routed                    bool // priorities and fair keys (shardsRouted)
	shards, queues, instances int
	tasks, concurrency        int
	work, latency             time.Duration // per task; per request (the proxy)
	limits                    throttle.Limits
	// coldStart schedules the backlog before any worker runs and starts
	// them with the limits on, so that every request of the drain is
	// counted under them (the fleet's start-up included in the time).
	coldStart bool
}

// drained is what a drain measured: its time, the proxy's counts while
// draining, and each bucket's.
type drained struct {
	seconds float64
	// steady is the rate between a tenth and nine tenths of the tasks
	// handled: the fleet's pace once started, without its start-up and
	// the last stragglers.
	steady  float64
	stats   throttle.Stats
	buckets map[string]throttle.BucketStats
}

// drain starts sp.instances in-process workers behind a throttling proxy
// on a fresh Azurite, schedules sp.tasks tasks due now, applies the limits
// and times until every task was handled.
func (b *bench) drain(ctx context.Context, sp drainSpec) (drained, error) {
	var d drained
	srv, err := b.startAzurite(ctx, "shards")
	if err != nil {
		return d, err
	}
	defer srv.Stop()
	bp, qp, tp := srv.Ports()
	proxies, err := throttle.NewSet(bp, qp, tp, throttle.Options{Logger: quietLogger("proxy"), Latency: sp.latency})
	if err != nil {
		return d, err
	}
	defer proxies.Close()
	names := leasecron.Names{Shards: sp.shards, Queues: sp.queues}
	if sp.routed {
		// A fleet that has run before has its levels' and lanes' queues:
		// made here, before the workers start (which find them by
		// listing), so that what is measured is the steady state, not
		// how soon a queue used for the first time is found.
		if err := makeRoutedQueues(ctx, srv.ConnectionString(), names, sp.tasks); err != nil {
			return d, err
		}
	}
	wctx, stop := context.WithCancel(ctx)
	workers := make([]*txWorker, sp.instances)
	defer func() {
		stop()
		for _, w := range workers {
			if w != nil {
				<-w.done
			}
		}
	}()
	startWorkers := func() error {
		for i := range workers {
			w, err := startWorkerAt(wctx, proxies.ConnectionString(), fmt.Sprintf("shards-%d", i), sp.work, func(o *leasecron.WorkerOptions) {
				o.Names = names
				o.ShardCycle = time.Second
				o.Consumer = queue.ConsumerSettings{Concurrency: sp.concurrency, PollMax: time.Second}
			})
			if err != nil {
				return err
			}
			workers[i] = w
		}
		return nil
	}
	if !sp.coldStart {
		if err := startWorkers(); err != nil {
			return d, err
		}
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: proxies.ConnectionString()},
		Names: names, SendWithin: -1, Logger: quietLogger("shards")})
	if err != nil {
		return d, err
	}
	if !sp.coldStart {
		// Let the fleet settle (leader, shard map) before the limits apply.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return d, err
		}
	}
	items := make([]leasecron.Item, sp.tasks)
	now := time.Now()
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("scale-%05d", i), Type: noopType, Due: now}
		if sp.routed {
			items[i].Priority, items[i].FairKey = routedItem(i)
		}
	}
	if _, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		return d, err
	}
	before, bucketsBefore := proxies.Stats(), proxies.Buckets()
	if err := proxies.SetLimits(sp.limits); err != nil {
		return d, err
	}
	if sp.coldStart {
		if err := startWorkers(); err != nil {
			return d, err
		}
	}
	t0 := time.Now()
	deadline := t0.Add(10 * time.Minute)
	var t10, t90 time.Time
	for {
		var handled int64
		for _, w := range workers {
			handled += w.handled.Load()
		}
		if t10.IsZero() && handled*10 >= int64(sp.tasks) {
			t10 = time.Now()
		}
		if t90.IsZero() && handled*10 >= 9*int64(sp.tasks) {
			t90 = time.Now()
		}
		if handled >= int64(sp.tasks) {
			break
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("%d of %d tasks handled in 10 minutes", handled, sp.tasks)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return d, err
		}
	}
	d.seconds = time.Since(t0).Seconds()
	if span := t90.Sub(t10).Seconds(); span > 0 {
		d.steady = 0.8 * float64(sp.tasks) / span
	}
	st := proxies.Stats()
	d.stats = throttle.Stats{Requests: st.Requests - before.Requests, Refused: st.Refused - before.Refused,
		QueueLimit: st.QueueLimit - before.QueueLimit, PartitionLimit: st.PartitionLimit - before.PartitionLimit, AccountLimit: st.AccountLimit - before.AccountLimit}
	d.buckets = map[string]throttle.BucketStats{}
	for k, v := range proxies.Buckets() {
		w := bucketsBefore[k]
		d.buckets[k] = throttle.BucketStats{Requests: v.Requests - w.Requests, Cost: v.Cost - w.Cost, Refused: v.Refused - w.Refused}
	}
	return d, nil
}

// routedItem is the priority and fair key of the routed design's task i:
// the four levels and eight tenants in turn.
func routedItem(i int) (int, string) { return i%4 + 1, fmt.Sprintf("tenant-%d", i%8) }

// makeRoutedQueues makes the work queues the routed design's tasks go to
// on the account of cs.
func makeRoutedQueues(ctx context.Context, cs string, names leasecron.Names, tasks int) error {
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: cs}, Names: names, Logger: quietLogger("shards")})
	if err != nil {
		return err
	}
	sc, err := storage.New(storage.Config{ConnectionString: cs})
	if err != nil {
		return err
	}
	made := map[string]bool{}
	for i := range min(tasks, 32) {
		p, key := routedItem(i)
		r := cl.RouteOf(leasecron.Item{Type: noopType, Priority: p, FairKey: key})
		for _, name := range queue.QueueNames(queue.RouteBase(leasecron.DefaultNames().Queue, r), names.Queues) {
			if made[name] {
				continue
			}
			made[name] = true
			if err := sc.EnsureQueue(ctx, name); err != nil {
				return fmt.Errorf("make queue %s: %w", name, err)
			}
		}
	}
	return nil
}

package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// runPartsSettle, when not 0, is how long a new run-record partition
// count is read before it is written under, in place of
// shard.RunPartsSettle (tests shorten it).
var runPartsSettle atomic.Int64

// DefaultShardCycle is the default WorkerOptions.ShardCycle.
const DefaultShardCycle = 5 * time.Second

func (w *Worker) sharded() bool { return w.o.Names.Shards > 1 }

// shardEarly is how far ahead a shard's mover sends tasks: through a dead
// owner's failover (its member lease lapsing, then a cycle for the cop to
// see it and one for the new owner to read the map), so that they still
// start on time.
func (w *Worker) shardEarly() time.Duration {
	if w.o.Mover.Early != 0 {
		return w.o.Mover.Early
	}
	l := w.o.Lease.WithDefaults()
	return max(l.LeaseDuration+2*w.o.ShardCycle, w.o.Mover.PollEvery)
}

// balance shares the shards among the live instances while this instance
// is the traffic cop.
func (w *Worker) balance(ctx context.Context, gen int64) error {
	b := &shard.Balancer{
		T:      w.shardMap,
		Roster: &shard.BlobRoster{C: w.sc.Blob.NewContainerClient(w.o.Names.Container), Forget: 10 * w.o.Lease.WithDefaults().LeaseDuration, Clock: w.o.Clock},
		Count:  w.o.Names.Shards,
		Cycle:  w.o.ShardCycle,
		Clock:  w.o.Clock,
		Logger: w.log.With("component", "balancer"),
		// The run records' partitions grow with the shards.
		RunParts:    runs.Buckets,
		RunPartsFor: runPartsFor(w.o.Names),
		Settle:      time.Duration(runPartsSettle.Load()),
		OnChange: func(shard.Assignment) {
			w.metrics.ShardMoved()
		},
	}
	return b.Run(ctx, gen)
}

// own keeps this instance a member of the fleet (a lease on its member
// blob) and moves the shards the map gives it, until ctx ends. Losing the
// member lease stops every shard's mover at once; the instance then joins
// again.
func (w *Worker) own(ctx context.Context) error {
	cc := w.sc.Blob.NewContainerClient(w.o.Names.Container)
	member := shard.MemberName(w.o.InstanceID)
	sem, err := trafficcop.NewSemaphore(cc, member, 1, trafficcop.SemaphoreOptions{
		Prefix: shard.MemberPrefix, LeaseTiming: w.o.Lease.LeaseTiming, Clock: w.o.Clock, Logger: w.log})
	if err != nil {
		return fmt.Errorf("shard membership: %w", err)
	}
	log := w.log.With("component", "shards", "member", member)
	o := &shard.Owner{T: w.shardMap, Member: member, Cycle: w.o.ShardCycle, Clock: w.o.Clock, Logger: log, Move: w.moveShard,
		Early: w.shardEarly(), NextDue: w.sched.NextDue, Point: w.sched.Point, SweepEvery: max(0, w.o.Mover.WithDefaults().SweepEvery),
		OnChange: func(owned []string) { w.metrics.SetShardsOwned(len(owned)) }}
	if w.runLayout != nil {
		o.OnRead = w.runLayout.tell
	}
	w.mu.Lock()
	w.owner = o
	w.mu.Unlock()
	for {
		slot, err := sem.TryAcquire(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, trafficcop.ErrNoSlot) {
				log.Warn("another process holds this instance's member lease (two workers with one instance id?); trying again", "err", err)
			} else {
				log.Warn("cannot join the fleet's members; trying again", "err", err)
			}
			if clock.Sleep(ctx, w.o.Clock, w.o.ShardCycle) != nil {
				return nil
			}
			continue
		}
		log.Info("joined the fleet's members")
		// The owner runs under the slot: losing the lease ends every move.
		octx, cancel := context.WithCancel(slot.Context())
		stop := context.AfterFunc(ctx, cancel)
		_ = o.Run(octx)
		stop()
		cancel()
		// Stopping: release at once, so the cop hands the shards on within
		// its next cycle.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = slot.Release(rctx)
		rcancel()
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("lost the member lease; stopped moving shards, joining again", "err", context.Cause(slot.Context()))
	}
}

// gateBusy reports whether a pass keeps its shard polled. Held back, a
// pass of a shard with nothing due is no reason to: the gate reads the
// shard's earliest row and polls while one is due within the early window
// (a quiet shard's sweep pass would otherwise turn it into a poller for as
// long as the queue is deep).
func gateBusy(r schedule.PassReport) bool { return r.Busy && !r.HeldBack || r.Rows > 0 }

// moveShard moves one shard as its owner under epoch, paced by its gate
// (shard.Owner.Move).
func (w *Worker) moveShard(ctx context.Context, s string, epoch int64, pace func(context.Context, bool, time.Duration) error) error {
	w.mu.Lock()
	if w.sends == nil {
		w.sends = make(chan struct{}, cmp.Or(w.o.Mover.Concurrency, schedule.DefaultConcurrency))
	}
	sends := w.sends
	w.mu.Unlock()
	m, err := w.newMover([]string{s}, epoch, w.shardEarly(), false, func(ctx context.Context, r schedule.PassReport) error {
		return pace(ctx, gateBusy(r), r.Wait)
	}, sends)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.movers == nil {
		w.movers = map[string]*schedule.Mover{}
	}
	w.movers[s] = m
	w.mu.Unlock()
	return m.Run(ctx)
}

// OwnedShards returns the shards this instance moves now (sharded; nil
// otherwise, or before it owns any).
func (w *Worker) OwnedShards() []string {
	w.mu.Lock()
	o := w.owner
	w.mu.Unlock()
	if o == nil {
		return nil
	}
	return o.Owned()
}

// ShardReport is the state of a sharded schedule (Client.Shards).
type ShardReport struct {
	// Count is the shard count this client is configured with
	// (Names.Shards).
	Count int
	// MapCount is the shard count the traffic cop last balanced for (0:
	// the map was never written, as in an unsharded fleet).
	MapCount int
	// Generation is the lease generation of the traffic cop that last
	// wrote the map.
	Generation int64
	// PrevCount is the count before the last change (SetShards) while the
	// owners still make the tasks placed under it findable (0: none).
	PrevCount int
	// Span is how many shards may hold tasks (the largest count ever):
	// every one of them is owned and moved.
	Span int
	// RunPartitions is how many partitions new run records are spread
	// over: it grows with the shards (never below 4), and RunPartitionsRead
	// lists every count records may still be under, which lookups try
	// (a count the traffic cop has just added is read two minutes before
	// it is written under).
	RunPartitions     int
	RunPartitionsRead []int
	// Shards are the shards, in order.
	Shards []ShardState
	// Members are the instances that have joined, live or not (a member
	// not live for ten lease durations is forgotten).
	Members []ShardMember
}

// ShardState is one shard of a ShardReport.
type ShardState struct {
	Shard string
	// Owner is the member name of the instance that moves it ("": none).
	Owner string
	// Epoch is the shard's fencing epoch (it grows with every change of
	// owner).
	Epoch int64
	// Since is when the traffic cop gave it to Owner (zero: never).
	Since time.Time
	// HandingOverFrom is the previous owner while it lets go.
	HandingOverFrom string
	// Quiet reports that nothing is due in the shard within its owner's
	// early window, so the owner has stopped polling it (a client that
	// writes a task due before WakeBefore wakes it; the owner also looks
	// at one quiet shard a cycle).
	Quiet      bool
	WakeBefore time.Time
	// Pointed: its owner has made its tasks findable under the current
	// count (true when no change is under way).
	Pointed bool
	// Due is how many of its tasks are due and not yet moved (at most
	// schedule.DueCountCap; DueCapped says there are more).
	Due       int
	DueCapped bool
	// Lag is how long its oldest due task has been due (0: none).
	Lag time.Duration
}

// ShardMember is an instance in a ShardReport.
type ShardMember struct {
	// Name is the member name (the instance id, with characters other than
	// letters, digits, '.', '_' and '-' replaced by '_').
	Name string
	// Live reports that its member lease is in force.
	Live bool
	// Shards is how many shards it owns.
	Shards int
}

// Shards reports the shard map, each shard's due backlog and the members:
// one query of the map, one listing of the members and one query per
// shard.
func (c *Client) Shards(ctx context.Context) (ShardReport, error) {
	r := ShardReport{Count: c.o.Names.Shards}
	m, err := shard.Read(ctx, c.shardMap)
	if err != nil && !errors.Is(err, storage.ErrTableNotFound) {
		return r, err
	}
	l := m.Layout(c.o.Names.Shards)
	r.MapCount, r.Generation, r.PrevCount, r.Span = m.Count, m.Generation, m.PrevCount, l.Span
	rl := layoutOf(m)
	r.RunPartitions, r.RunPartitionsRead = rl.Write, rl.Read
	owned := map[string]int{}
	now := c.o.Clock.Now()
	for _, name := range shard.Names(l.Span) {
		a := m.Shards[name]
		st := ShardState{Shard: name, Owner: a.Owner, Epoch: a.Epoch, Since: a.Since, HandingOverFrom: a.From,
			Quiet: !a.WakeBefore.IsZero(), WakeBefore: a.WakeBefore, Pointed: m.PrevCount == 0 || a.Done == m.Count}
		d, err := c.sched.DueIn(ctx, name, now)
		if err != nil {
			return r, err
		}
		st.Due, st.DueCapped, st.Lag = d.Count, d.Capped, d.Lag
		if a.Owner != "" {
			owned[a.Owner]++
		}
		r.Shards = append(r.Shards, st)
	}
	roster := &shard.BlobRoster{C: c.sc.Blob.NewContainerClient(c.o.Names.Container), Clock: c.o.Clock}
	members, err := roster.Members(ctx)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return r, err
	}
	for _, mb := range members {
		r.Members = append(r.Members, ShardMember{Name: mb.Name, Live: mb.Live, Shards: owned[mb.Name]})
	}
	return r, nil
}

// ShardOf returns the shard (the ScheduledItems partition) a task with
// this id is written to: the id's FNV-1a-32 hash modulo Names.Shards, as
// at least two digits ("00" with one shard). See the README's "Sharding"
// for the same function in Python, Node and C#.
func (c *Client) ShardOf(id string) string { return c.sched.ShardOf(id) }

// SetShards changes the shard count of a sharded schedule online (`leasecron
// shards set N`): new tasks are placed by n at once (clients read the map
// within a second), and every shard's owner writes pointers so that tasks
// placed under the old count are found by id under the new one. Tasks do
// not move: a shard keeps being moved while it holds tasks, so growing and
// shrinking are both safe (after shrinking, the shards beyond n are still
// owned and moved, quiet once empty). A change while the last one is
// still being applied is refused; so is one before any worker with
// Names.Shards above 1 has written the shard map.
func (c *Client) SetShards(ctx context.Context, n int) error {
	if n < 2 || n > MaxShards {
		return opt.Invalid(ErrInvalidOptions, "shard count", n, fmt.Sprintf("2 to %d (a sharded schedule stays sharded)", MaxShards))
	}
	_, err := shard.SetCount(ctx, c.shardMap, n)
	return err
}

// Sharded reports whether this client is configured for a sharded
// schedule (Names.Shards above 1).
func (c *Client) Sharded() bool { return c.o.Names.Shards > 1 }

// drainOthersEvery is how often an idle worker that does not compete for
// the lease looks for work queues it has not drained yet: beyond
// Names.Queues (a client configured with more queues sends to them), or a
// priority level or fairness lane of a named queue it consumes that was
// first used since. drainOthersListen is how often the leader (its
// consumer listens) does, drainOthersBusy a worker that got messages in
// the last 10 s; a standby looks when the leader's note in the lease says
// the queues changed (fleetNote), and every drainOthersStandby besides.
var (
	drainOthersEvery, drainOthersListen, drainOthersBusy = 30 * time.Second, 10 * time.Second, time.Second
	drainOthersStandby                                   = 5 * time.Minute
)

// drainOthers makes the consumer drain, besides the work queues it starts
// with, any other queue of their family in the account that belongs to a
// named queue it consumes, looking now and then as drainOthersEvery and
// the others say (one list request each), so that a client configured
// with more queues than the workers strands nothing, and a priority level
// or fairness lane used for the first time is found within seconds by the
// workers that are busy and the leader.
func (w *Worker) drainOthers(ctx context.Context, c *queue.Client, busy, listening func() bool) {
	for {
		added, err := c.DrainOthers(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.log.Debug("cannot list the work queues", "err", err)
		}
		w.fleet.setQueues(c.Digest())
		if len(added) > 0 {
			w.log.Info("draining work queues found in the account (a priority level, a fairness lane, or names.queues beyond this worker's)",
				"queues", added, "names_queues", w.o.Names.Queues)
		}
		idle := drainOthersEvery
		if w.cop != nil {
			idle = max(idle, drainOthersStandby)
		}
		step := min(drainOthersBusy, drainOthersEvery)
	wait:
		for waited := time.Duration(0); waited < idle; waited += step {
			t := w.o.Clock.NewTimer(step)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-w.fleet.relist:
				t.Stop()
				break wait
			case <-t.C():
			}
			if busy() || listening() && waited+step >= min(drainOthersListen, drainOthersEvery) {
				break
			}
		}
	}
}

// shardLags returns the last move lag of each shard this instance moves.
func (w *Worker) shardLags() map[string]time.Duration {
	owned := w.OwnedShards()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Duration, len(owned))
	for _, s := range owned {
		if m := w.movers[s]; m != nil {
			out[s] = m.Stats().LastMoveLag
		}
	}
	return out
}

//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// The scenarios of a sharded fleet only (make chaos-shards; skipped in an
// unsharded run). Each checks what every scenario does (nothing lost, at
// most one mover of a shard at once) and the fault's own bound.

// shardCycle is the fleet's shards.cycle in a sharded run (fleetConfig).
const shardCycle = time.Second

func shardedOnly(t *testing.T) {
	t.Helper()
	if chaosShards() < 2 {
		t.Skip("a sharded scenario: CHAOS_SHARDS=8 (make chaos-shards)")
	}
}

// settledAmong waits until the shards are shared among want live members
// and returns each one's shards.
func (r *run) settledAmong(ctx context.Context, want int) map[string][]string {
	r.t.Helper()
	owned, err := fleet.WaitShardsSettled(ctx, r.cl, want)
	if err != nil {
		r.t.Fatal(err)
	}
	return owned
}

// mostShards returns the member that owns the most shards.
func mostShards(owned map[string][]string) string {
	victim := ""
	for m, ss := range owned {
		if victim == "" || len(ss) > len(owned[victim]) || len(ss) == len(owned[victim]) && m < victim {
			victim = m
		}
	}
	return victim
}

// spread returns n tasks of type rec with ids prefix…, due from base over
// window at random.
func spread(prefix string, n int, base time.Time, window time.Duration) []leasecron.Item {
	var items []leasecron.Item
	for _, id := range ids(prefix, 0, n) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(window))))})
	}
	return items
}

// loadedShards starts scenario's workers (a sharded run only), waits until
// they share the shards, and schedules n tasks (ids prefix…) due at random
// over window from lead on; it returns the run, the scenario's context
// and when the tasks start coming due.
func loadedShards(t *testing.T, scenario string, workers int, prefix string, n int, lead, window time.Duration) (*run, context.Context, time.Time) {
	t.Helper()
	shardedOnly(t)
	r := newRun(t, scenario, false, workers, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	r.settledAmong(ctx, workers)
	base := time.Now().Add(lead)
	if failed := r.schedule(ctx, spread(prefix, n, base, window), 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	return r, ctx, base
}

// ownerFault is the fault of a shard owner hit by signal at at, whose
// shards were owned again after took; past takeoverLimit it fails the
// scenario.
func (r *run) ownerFault(signal, victim string, at time.Time, took time.Duration, detail string) Fault {
	if took > takeoverLimit {
		r.t.Errorf("the shards of %s were owned again %s after the %s (limit %s)", victim, round(took), signal, takeoverLimit)
	}
	return Fault{Kind: signal + " shard owner " + victim, At: r.since(at), Takeover: Duration(took), Detail: detail}
}

// takeoverLimit is how soon a dead owner's shards must be owned again:
// its member lease lapses, the traffic cop's next cycle sees it, the new
// owners' next read starts their movers (and 3 s for this test's polling
// on a loaded machine).
const takeoverLimit = leaseDuration + 2*shardCycle + 3*time.Second

// TestShardOwnerKillUnderBacklog is scenario 8: two workers share the
// shards; as 3,000 tasks come due, the owner of half of them is
// SIGKILLed. Its shards are owned again once its member lease lapses, and
// every task runs.
func TestShardOwnerKillUnderBacklog(t *testing.T) {
	r, ctx, base := loadedShards(t, "8 SIGKILL of the owner of half the shards under a 3,000-task backlog", 2, "b", 3000, 50*time.Second, 5*time.Second)
	time.Sleep(time.Until(base.Add(time.Second))) // the backlog is being moved
	owned := r.settledAmong(ctx, 2)
	victim := mostShards(owned)
	backlog, _ := r.dueBacklog(ctx)
	at := r.kill(victim)
	r.settledAmong(ctx, 1)
	took := time.Since(at)
	r.note("SIGKILL of %s, owner of %d of %d shards, with %d due rows in the schedule; its shards owned again after %s", victim, len(owned[victim]), chaosShards(), backlog, round(took))
	r.startWorker()
	r.waitExecuted(4 * time.Minute)
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "takeover: SIGKILL → every shard owned by a live instance again (the map); recovery: SIGKILL → the first task started by another worker"}
	f := r.ownerFault("SIGKILL", victim, at, took, fmt.Sprintf("owner of %d of %d shards; %d due rows left at the kill", len(owned[victim]), chaosShards(), backlog))
	if d, ok := firstStartAfter(a, at, victim); ok {
		f.Recovery = Duration(d)
	}
	res.Faults = append(res.Faults, f)
	r.report(a, res, 1)
}

// TestShardOwnerStoppedPastItsLease is scenario 9: three workers share the
// shards while 1,500 tasks come due over a minute; the owner of the most
// shards is SIGSTOPped for its lease and 5 s more, then resumed. Storage
// fences it out (its member lease lapses, its shards' epochs move on), so
// on resuming it stops moving and joins again; nothing is lost and no
// shard has two movers acting at once.
func TestShardOwnerStoppedPastItsLease(t *testing.T) {
	r, ctx, base := loadedShards(t, "9 SIGSTOP of a shard owner past its lease", 3, "p", 1500, 30*time.Second, time.Minute)
	time.Sleep(time.Until(base.Add(10 * time.Second)))
	owned := r.settledAmong(ctx, 3)
	victim := mostShards(owned)
	at := time.Now()
	r.f.Signal(victim, syscall.SIGSTOP)
	r.settledAmong(ctx, 2)
	took := time.Since(at)
	time.Sleep(time.Until(at.Add(leaseDuration + 5*time.Second)))
	r.f.Signal(victim, syscall.SIGCONT)
	resumed := time.Now()
	r.settledAmong(ctx, 3)
	r.note("SIGSTOP of %s (owner of %d of %d shards): its shards owned by the others %s later; resumed after %s, it rejoined %s after that",
		victim, len(owned[victim]), chaosShards(), round(took), round(resumed.Sub(at)), round(time.Since(resumed)))
	r.waitExecuted(4 * time.Minute)
	// A stopped process does nothing, but its log shows its terms open
	// until it resumes and notices that its member lease has lapsed. Its
	// terms count as ended at the SIGSTOP when it ended them within a
	// second of resuming (its movers' commits are fenced by the new
	// epochs in any case); any other overlap still fails.
	r.afterAnalysis = func(a *analysis) {
		clipped := append([]Term(nil), a.shardTerms...)
		n, last := 0, resumed
		for i, term := range clipped {
			if term.Worker == victim && term.Start.Before(at) && term.End.After(at) && !term.End.After(resumed.Add(time.Second)) {
				clipped[i].End = at
				n++
				last = later(last, term.End)
			}
		}
		a.maxMov, a.overlaps = MaxShardOverlap(clipped)
		r.note("%d shard terms of %s were open through its SIGSTOP; it ended them %s after resuming", n, victim, round(last.Sub(resumed)))
	}
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "takeover: SIGSTOP → every shard owned by a live instance again; the stopped owner resumes after its lease has lapsed"}
	res.Faults = append(res.Faults, r.ownerFault("SIGSTOP", victim, at, took, fmt.Sprintf("owner of %d of %d shards, stopped for %s", len(owned[victim]), chaosShards(), round(resumed.Sub(at)))))
	r.report(a, res, 1)
}

// TestReshardingUnderLoadChaos is scenario 10: three workers move 2,000
// tasks due over 100 s and a stream of new ones while the shard count
// doubles and, once every shard's tasks are findable under it, goes back.
func TestReshardingUnderLoadChaos(t *testing.T) {
	r, ctx, base := loadedShards(t, "10 resharding under load (N → 2N → N)", 3, "h", 2000, 30*time.Second, 100*time.Second)
	n := chaosShards()
	// The stream: a task every 100 ms, due 5 s on, through both changes.
	streamCtx, stopStream := context.WithCancel(ctx)
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		for i := 0; streamCtx.Err() == nil; i++ {
			r.schedule(streamCtx, []leasecron.Item{{ID: fmt.Sprintf("m%05d", i), Type: "rec", Due: time.Now().Add(5 * time.Second)}}, 1)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	time.Sleep(time.Until(base.Add(20 * time.Second)))
	from := n
	change := func(to int) {
		t0 := time.Now()
		if err := r.cl.SetShards(ctx, to); err != nil {
			t.Fatal(err)
		}
		if err := fleet.WaitShardCount(ctx, r.cl, to); err != nil {
			t.Fatal(err)
		}
		r.note("%d → %d shards: every shard's tasks findable under %d after %s", from, to, to, round(time.Since(t0)))
		from = to
	}
	change(2 * n)
	time.Sleep(20 * time.Second)
	change(n)
	time.Sleep(10 * time.Second)
	stopStream()
	<-streamed
	r.waitExecuted(4 * time.Minute)
	a := r.stopAndAnalyse()
	r.report(a, Result{RecoveryRule: "no fault: the count changes under load; nothing lost, each task once"}, 1)
}

// firstStartAfter returns how long after at a worker other than not first
// started a task.
func firstStartAfter(a *analysis, at time.Time, not string) (time.Duration, bool) {
	var first time.Time
	for _, x := range a.records {
		if x.Worker != not && x.At.After(at) && x.Phase != "end" && (first.IsZero() || x.At.Before(first)) {
			first = x.At
		}
	}
	return first.Sub(at), !first.IsZero()
}

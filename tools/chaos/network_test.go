//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/tools/internal/faultproxy"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// proxies stand between one worker and Azurite's three services.
type proxies [3]*faultproxy.Proxy

func (ps proxies) set(t *testing.T, m faultproxy.Mode) {
	for _, p := range ps {
		if err := p.Set(m); err != nil {
			t.Fatal(err)
		}
	}
}

func (ps proxies) latency(t *testing.T, d time.Duration) {
	for _, p := range ps {
		if err := p.SetLatency(d); err != nil {
			t.Fatal(err)
		}
	}
}

// during applies a fault (apply sets the proxies' mode or latency) for d,
// then lets traffic pass again, and returns the fault with its times.
func (ps proxies) during(t *testing.T, kind string, d time.Duration, apply func()) netFault {
	nf := netFault{kind: kind, at: time.Now()}
	apply()
	time.Sleep(d)
	ps.set(t, faultproxy.Pass)
	nf.heal = time.Now()
	return nf
}

func (ps proxies) resetAll() (n int) {
	for _, p := range ps {
		n += p.ResetAll()
	}
	return n
}

func (ps proxies) accepted() (n int64) {
	for _, p := range ps {
		n += p.Stats().Accepted
	}
	return n
}

// startProxiedWorker starts a worker whose connection string names three
// fault proxies (blob, queue, table) in front of the fleet's Azurite. The
// override is a later LEASECRON_STORAGE_CONNECTION_STRING in the worker's
// environment: os/exec keeps the last value of a duplicated key.
func (r *run) startProxiedWorker() (string, proxies) {
	r.t.Helper()
	var ps proxies
	b, q, tb := r.f.Azurite.Ports()
	for i, port := range []int{b, q, tb} {
		p, err := faultproxy.New(faultproxy.Options{Target: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
		if err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { p.Close() })
		ps[i] = p
	}
	cs := azurite.ConnectionString("127.0.0.1", ps[0].Port(), ps[1].Port(), ps[2].Port())
	name := r.startWorker("LEASECRON_STORAGE_CONNECTION_STRING=" + cs)
	return name, ps
}

// netSetup starts a fleet whose worker w1 talks to Azurite through proxies.
// With leader set, w1 starts alone and leads before the others start;
// otherwise another worker leads first.
func netSetup(t *testing.T, scenario string, leader bool, others int) (*run, string, proxies) {
	r := newRun(t, scenario, false, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var name string
	var ps proxies
	if leader {
		name, ps = r.startProxiedWorker()
		if h, _ := r.waitLeader(ctx, ""); h != name {
			t.Fatalf("leader is %s, want the proxied worker %s", h, name)
		}
		for range others {
			r.startWorker()
		}
	} else {
		first := r.startWorker()
		if h, _ := r.waitLeader(ctx, ""); h != first {
			t.Fatalf("leader is %s, want %s", h, first)
		}
		name, ps = r.startProxiedWorker()
		for range others - 1 {
			r.startWorker()
		}
	}
	return r, name, ps
}

// scheduleSpread schedules n rec and slow recslow tasks due over window
// from base.
func (r *run) scheduleSpread(ctx context.Context, prefix string, n, slow int, base time.Time, window time.Duration) {
	r.t.Helper()
	var items []leasecron.Item
	for _, id := range ids(prefix, 0, n) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(window))))})
	}
	for _, id := range ids(slowPrefix+prefix, 0, slow) {
		items = append(items, leasecron.Item{ID: id, Type: "recslow", Payload: "2", Due: base.Add(time.Duration(rand.Int64N(int64(window))))})
	}
	rand.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	if failed := r.schedule(ctx, items, 16); len(failed) > 0 {
		r.t.Fatalf("%d tasks not scheduled", len(failed))
	}
}

// lateness returns the largest lateness of the first executions of tasks
// due in [from, to): start − due, or start − acknowledgement for a task
// whose scheduling was acknowledged after its due time.
func (r *run) lateness(a *analysis, from, to time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var worst time.Duration
	for id, x := range a.x.First {
		d := r.dues[id]
		if d.Before(from) || !d.Before(to) {
			continue
		}
		worst = max(worst, x.At.Sub(later(d, r.acks[id])))
	}
	return worst
}

// latenessBefore returns the p-th percentile lateness of the tasks whose
// first execution started before t.
func (r *run) latenessBefore(a *analysis, t time.Time, p float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ds []time.Duration
	for id, x := range a.x.First {
		if x.At.Before(t) {
			ds = append(ds, x.At.Sub(later(r.dues[id], r.acks[id])))
		}
	}
	return fleet.Percentile(ds, p)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// netFault is one fault phase on the proxied worker.
type netFault struct {
	kind     string
	at, heal time.Time
}

// finishNet analyses a network scenario: recovery is from healing to the
// proxied worker's next execution; the detail gives the worst lateness of
// tasks due during the fault against the worst before any fault.
func finishNet(t *testing.T, r *run, name string, ps proxies, base time.Time, faults []netFault, leaderFaults bool) {
	if ps.accepted() == 0 {
		t.Errorf("no connection went through the proxies: %s did not use the overriding connection string", name)
	}
	r.waitExecuted(3 * time.Minute)
	a := r.stopAndAnalyse()
	r.note("before the first fault, lateness of tasks that ran: p50 %s, p99 %s", round(r.latenessBefore(a, faults[0].at, 50)), round(r.latenessBefore(a, faults[0].at, 99)))
	res := Result{RecoveryRule: "from healing to the next execution on the faulted worker; lateness: the worst (start − due) among tasks due during the fault"}
	if leaderFaults {
		res.RecoveryRule = "takeover: from the fault to the next term of control of another worker (when the fault ended the leader's term); recovery: from the fault to the first execution of a task moved by that term, or, when control stayed, from healing to the next execution on the faulted worker; lateness: the worst (start − due) among tasks due during the fault"
	}
	for _, nf := range faults {
		f := Fault{Kind: nf.kind, At: r.since(nf.at)}
		late := r.lateness(a, nf.at, nf.heal)
		detail := fmt.Sprintf("lasted %s; worst lateness of tasks due meanwhile %s", round(nf.heal.Sub(nf.at)), round(late))
		took := false
		if leaderFaults {
			if next, d, ok := takeoverAfter(a, nf.at, name); ok && next.Start.Before(nf.heal.Add(leaseDuration)) {
				took = true
				f.Takeover = Duration(d)
				if x, ok := firstRunOfGeneration(a, nf.at, next.Generation); ok {
					f.Recovery = Duration(x.At.Sub(nf.at))
				}
				detail += fmt.Sprintf("; %s took over with generation %d", next.Worker, next.Generation)
			}
		}
		if !took {
			if x, ok := FirstStartAfter(a.records, nf.heal, func(x fleet.Record) bool { return x.Worker == name }); ok {
				f.Recovery = Duration(x.At.Sub(nf.heal))
			} else {
				detail += fmt.Sprintf("; %s ran nothing after healing", name)
			}
		}
		f.Detail = detail
		res.Faults = append(res.Faults, f)
	}
	r.report(a, res, 1)
}

// TestNetworkLatency is scenario 4a: the leader's traffic is delayed by
// 300 ms each way for 15 s, then by 1 s each way (a 2 s round trip, close
// to the 2.5 s deadline of lease calls) for 15 s.
func TestNetworkLatency(t *testing.T) {
	r, name, ps := netSetup(t, "4a network latency on the leader", true, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := time.Now().Add(5 * time.Second)
	r.scheduleSpread(ctx, "l", 1800, 100, base, 60*time.Second)
	var faults []netFault
	for i, ph := range []struct {
		after, lat time.Duration
	}{{10 * time.Second, 300 * time.Millisecond}, {35 * time.Second, time.Second}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			time.Sleep(time.Until(base.Add(ph.after)))
			faults = append(faults, ps.during(t, fmt.Sprintf("latency %s each way on %s", ph.lat, name), 15*time.Second,
				func() { ps.latency(t, ph.lat) }))
		})
	}
	finishNet(t, r, name, ps, base, faults, true)
}

// TestNetworkStall is scenario 4b: a worker that is not the leader, with
// tasks in flight, has every connection stalled (accepted, nothing
// forwarded) for 25 s: its messages become visible to the others when
// their visibility lapses, and its late acknowledgements fail harmlessly.
func TestNetworkStall(t *testing.T) {
	r, name, ps := netSetup(t, "4b network stall of a worker", false, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := time.Now().Add(5 * time.Second)
	r.scheduleSpread(ctx, "b", 1800, 200, base, 50*time.Second)
	time.Sleep(time.Until(base.Add(12 * time.Second)))
	nf := ps.during(t, "stall of every connection of "+name, 25*time.Second, func() { ps.set(t, faultproxy.Stall) })
	finishNet(t, r, name, ps, base, []netFault{nf}, false)
}

// TestNetworkResets is scenario 4c: every connection of the leader is
// reset every 300 ms for 20 s, then every connection attempt is reset for
// 5 s.
func TestNetworkResets(t *testing.T) {
	r, name, ps := netSetup(t, "4c connection resets on the leader", true, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := time.Now().Add(5 * time.Second)
	r.scheduleSpread(ctx, "c", 1800, 100, base, 50*time.Second)
	time.Sleep(time.Until(base.Add(10 * time.Second)))
	flap := netFault{kind: "connections of " + name + " reset every 300 ms", at: time.Now()}
	resets := 0
	for time.Since(flap.at) < 20*time.Second {
		resets += ps.resetAll()
		time.Sleep(300 * time.Millisecond)
	}
	flap.heal = time.Now()
	r.note("%d connections reset while flapping", resets)
	time.Sleep(5 * time.Second)
	hard := ps.during(t, "every connection of "+name+" reset for 5 s", 5*time.Second, func() { ps.set(t, faultproxy.Reset) })
	finishNet(t, r, name, ps, base, []netFault{flap, hard}, true)
}

// TestLeaderPartitionBlackhole is scenario 4d: the leader alone is cut off
// by a black hole (connections accepted, nothing forwarded) for 30 s. Its
// renewals hang until their call deadline and must not extend its belief:
// it must stop at its local deadline (its last successful renewal + lease −
// safety margin, so at most 13 s after the cut), before the lease expires
// at the service and another instance takes over.
func TestLeaderPartitionBlackhole(t *testing.T) {
	runLeaderPartition(t, "4d leader partition (black hole)", faultproxy.Stall)
}

// TestLeaderPartitionRefused is scenario 4e: as 4d, but the partition
// refuses connections (each renewal fails at once and is retried).
func TestLeaderPartitionRefused(t *testing.T) {
	runLeaderPartition(t, "4e leader partition (connections refused)", faultproxy.Partition)
}

func runLeaderPartition(t *testing.T, scenario string, mode faultproxy.Mode) {
	r, name, ps := netSetup(t, scenario, true, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := time.Now().Add(5 * time.Second)
	r.scheduleSpread(ctx, "p", 1800, 100, base, 50*time.Second)
	time.Sleep(time.Until(base.Add(10 * time.Second)))
	h, err := r.f.Leader(ctx)
	if err != nil || h.Holder != name {
		t.Fatalf("leader before the partition is %q (%v), want %s", h.Holder, err, name)
	}
	how := "black hole"
	if mode == faultproxy.Partition {
		how = "connections refused"
	}
	nf := ps.during(t, fmt.Sprintf("partition (%s) of leader %s", how, name), 30*time.Second, func() { ps.set(t, mode) })
	gen := h.Generation
	finishNetPartition(t, r, name, ps, base, nf, gen)
}

// finishNetPartition adds the partition's own checks to finishNet's.
func finishNetPartition(t *testing.T, r *run, name string, ps proxies, base time.Time, nf netFault, gen int64) {
	// finishNet analyses and reports; the partition checks need the terms,
	// so they run on a second reading of the same logs.
	checks := func(a *analysis) {
		old, ok := TermOf(a.terms, name, gen)
		if !ok {
			t.Errorf("no term of %s generation %d in the logs", name, gen)
			return
		}
		if old.EndReason != "lost" {
			t.Errorf("the partitioned leader's term ended %q, want lost: %s", old.EndReason, old)
		}
		belief := old.End.Sub(nf.at)
		if limit := leaseDuration - safetyMargin + time.Second; belief > limit {
			t.Errorf("the partitioned leader believed in control for %s after the cut (limit: lease − margin + 1 s = %s)", round(belief), limit)
		}
		next, _, ok := takeoverAfter(a, old.Start.Add(time.Millisecond), name)
		if !ok {
			t.Errorf("nobody took over from the partitioned leader")
			return
		}
		if !old.End.Before(next.Start) {
			t.Errorf("the new leader started before the old one stopped: %s, %s", old, next)
		}
		r.note("the partitioned leader stopped %s after the cut (local deadline); %s started %s after that (the lease expiring at the service)",
			round(belief), next.Worker, round(next.Start.Sub(old.End)))
	}
	r.afterAnalysis = checks
	finishNet(t, r, name, ps, base, []netFault{nf}, true)
}

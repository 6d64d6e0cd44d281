package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// The scenarios shared by the short versions (make test) and the long ones
// (make chaos). Each is one function with its sizes as parameters.

// leaderKillParams size scenario 1.
type leaderKillParams struct {
	workers int
	rounds  int // SIGKILLs of the leader
	rows    int // rows due in the past inserted per round (the backlog)
	api     int // tasks scheduled through the Go API per round, due over 3 s
}

// runLeaderKill is scenario 1: each round inserts a backlog of due rows,
// waits until the leader is moving it (its first execution under the
// leader's generation), SIGKILLs the leader mid-move and starts a
// replacement worker; the next leader must take over once the lease
// expires and move the rest.
func runLeaderKill(t *testing.T, scenario string, short bool, p leaderKillParams) {
	r := newRun(t, scenario, short, p.workers, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	leader, gen := r.waitLeader(ctx, "")
	type kill struct {
		at      time.Time
		victim  string
		gen     int64
		backlog int
	}
	var kills []kill
	for round := range p.rounds {
		prefix := fmt.Sprintf("r%d-", round)
		past := time.Now().Add(-time.Minute)
		r.insertRaw(ctx, "rec", ids(prefix, 0, p.rows), func(i int) time.Time { return past.Add(time.Duration(i) * time.Millisecond) })
		var items []leasecron.Item
		for i, id := range ids(fmt.Sprintf("a%d-", round), 0, p.api) {
			items = append(items, leasecron.Item{ID: id, Type: "rec", Due: time.Now().Add(time.Duration(i*3000/max(1, p.api)) * time.Millisecond)})
		}
		if failed := r.schedule(ctx, items, 8); len(failed) > 0 {
			t.Fatalf("%d tasks not scheduled", len(failed))
		}
		// The leader is moving this backlog once one of its rows has run
		// under the leader's generation. A liveness bound, generous: the
		// rows of the round wait behind what the last leader left (hundreds
		// of exec handlers, slow on a loaded 2-core machine).
		moving := waitUntil(90*time.Second, func() bool {
			for _, x := range r.records() {
				// Sharded, the shard owners move the backlog under their
				// epochs: any run of it will do.
				if (x.Generation == gen || chaosShards() > 1 && x.Generation > 0) && strings.HasPrefix(x.ID, prefix) {
					return true
				}
			}
			return false
		})
		if !moving {
			t.Fatalf("round %d: leader %s (generation %d) did not start moving the backlog within 90 s", round, leader, gen)
		}
		time.Sleep(time.Duration(rand.Int64N(int64(300 * time.Millisecond))))
		at := r.kill(leader)
		backlog, err := r.dueBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r.note("round %d: SIGKILL of leader %s (generation %d) with %d due rows still in the table", round, leader, gen, backlog)
		kills = append(kills, kill{at: at, victim: leader, gen: gen, backlog: backlog})
		r.startWorker()
		leader, gen = r.waitLeader(ctx, leader)
	}
	r.waitExecuted(3 * time.Minute)
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "takeover: SIGKILL → the next leader's \"acquired control\"; recovery: SIGKILL → the first execution of a task moved by that leader"}
	for _, k := range kills {
		f := Fault{Kind: "SIGKILL leader " + k.victim, At: r.since(k.at)}
		next, d, ok := takeoverAfter(a, k.at, k.victim)
		if !ok {
			t.Errorf("no takeover after the SIGKILL of %s", k.victim)
			res.Faults = append(res.Faults, f)
			continue
		}
		f.Takeover = Duration(d)
		if x, ok := firstRunOfGeneration(a, k.at, next.Generation); ok {
			f.Recovery = Duration(x.At.Sub(k.at))
		}
		f.Detail = fmt.Sprintf("%d due rows left at the kill; %s took over with generation %d", k.backlog, next.Worker, next.Generation)
		// The lease outlives its holder by at most its duration; the next
		// instance tries every poll (+20 % jitter).
		if limit := leaseDuration + 2*leasePoll + 3*time.Second; d > limit {
			t.Errorf("takeover after killing %s took %s (limit %s)", k.victim, d, limit)
		}
		res.Faults = append(res.Faults, f)
	}
	r.report(a, res, 1)
}

// workerKillParams size scenario 2.
type workerKillParams struct {
	workers   int
	rec, slow int           // tasks of type rec and recslow (2 s each)
	window    time.Duration // due times spread over it
	kills     int
	every     time.Duration
}

// runWorkerKill is scenario 2: tasks (some of them 2 s long) run on
// several workers; every few seconds a worker that is not the leader and
// has tasks in flight is SIGKILLed and a replacement started. Every task
// in flight on a killed worker must start again elsewhere.
func runWorkerKill(t *testing.T, scenario string, short bool, p workerKillParams) {
	r := newRun(t, scenario, short, p.workers, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r.waitLeader(ctx, "")
	base := time.Now().Add(5 * time.Second)
	var items []leasecron.Item
	for _, id := range ids("k", 0, p.rec) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(p.window))))})
	}
	for _, id := range ids(slowPrefix, 0, p.slow) {
		items = append(items, leasecron.Item{ID: id, Type: "recslow", Payload: "2", Due: base.Add(time.Duration(rand.Int64N(int64(p.window))))})
	}
	rand.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	if failed := r.schedule(ctx, items, 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	time.Sleep(time.Until(base.Add(2 * time.Second)))
	type kill struct {
		at       time.Time
		victim   string
		inFlight []string
	}
	var kills []kill
	alive := map[string]bool{}
	for _, n := range r.f.Names() {
		alive[n] = true
	}
	for range p.kills {
		time.Sleep(p.every)
		h, err := r.f.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs := r.records()
		victim, most := "", -1
		for n := range alive {
			if n == h.Holder {
				continue
			}
			if k := len(inFlight(rs, n, time.Now())); k > most {
				victim, most = n, k
			}
		}
		at := r.kill(victim)
		delete(alive, victim)
		kills = append(kills, kill{at: at, victim: victim, inFlight: inFlight(r.records(), victim, at)})
		alive[r.startWorker()] = true
	}
	r.waitExecuted(3 * time.Minute)
	// Let the re-runs of killed tasks finish before stopping.
	waitUntil(time.Minute, func() bool {
		rs := r.records()
		for _, k := range kills {
			for _, id := range k.inFlight {
				if _, ok := FirstStartAfter(rs, k.at, func(x fleet.Record) bool { return x.ID == id && x.Worker != k.victim }); !ok {
					return false
				}
			}
		}
		return true
	})
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "SIGKILL → every task that was in flight on the killed worker has started again on another worker (bounded by the visibility timeout, 15 s, and the run claim)"}
	orphans := 0
	for _, k := range kills {
		f := Fault{Kind: "SIGKILL worker " + k.victim, At: r.since(k.at)}
		var worst time.Duration
		rerun := 0
		for _, id := range k.inFlight {
			x, ok := FirstStartAfter(a.records, k.at, func(x fleet.Record) bool { return x.ID == id && x.Worker != k.victim })
			if !ok {
				t.Errorf("task %s, in flight on %s when it was killed, never started again", id, k.victim)
				continue
			}
			rerun++
			worst = max(worst, x.At.Sub(k.at))
		}
		for _, x := range a.records {
			if x.Worker == k.victim && x.Phase == "end" && x.At.After(k.at) {
				orphans++
			}
		}
		f.Recovery = Duration(worst)
		f.Detail = fmt.Sprintf("%d tasks in flight, %d started again elsewhere", len(k.inFlight), rerun)
		res.Faults = append(res.Faults, f)
	}
	if orphans > 0 {
		r.note("%d handler processes of killed workers ran on and recorded their end after the kill, although exec handlers get SIGKILL when their worker dies (Linux parent-death signal)", orphans)
	}
	r.report(a, res, 1)
}

// sigtermParams size scenario 5.
type sigtermParams struct {
	workers   int
	rec, slow int
	window    time.Duration
	rounds    int
}

// shutdownGrace is fleet.BaseConfig's worker.shutdown_grace.
const shutdownGrace = 10 * time.Second

// runSigterm is scenario 5: the leader, with tasks in flight, gets SIGTERM.
// It must release the lease so that another instance leads within one poll
// interval, finish its in-flight tasks and exit cleanly.
func runSigterm(t *testing.T, scenario string, short bool, p sigtermParams) {
	r := newRun(t, scenario, short, p.workers, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	leader, gen := r.waitLeader(ctx, "")
	base := time.Now().Add(5 * time.Second)
	var items []leasecron.Item
	for _, id := range ids("g", 0, p.rec) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(p.window))))})
	}
	for _, id := range ids(slowPrefix, 0, p.slow) {
		items = append(items, leasecron.Item{ID: id, Type: "recslow", Payload: "2", Due: base.Add(time.Duration(rand.Int64N(int64(p.window))))})
	}
	if failed := r.schedule(ctx, items, 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	time.Sleep(time.Until(base.Add(2 * time.Second)))
	type stop struct {
		at, exited time.Time
		victim     string
		gen        int64
		inFlight   []string
	}
	var stops []stop
	for i := range p.rounds {
		if i > 0 {
			time.Sleep(3 * time.Second) // let the new leader move for a while
		}
		var fl []string
		waitUntil(8*time.Second, func() bool { fl = inFlight(r.records(), leader, time.Now()); return len(fl) > 0 })
		r.expectExit(leader)
		at := time.Now()
		r.f.Signal(leader, syscall.SIGTERM)
		fl = inFlight(r.records(), leader, at)
		proc := r.f.Worker(leader)
		var exited time.Time
		select {
		case <-proc.Done():
			exited = time.Now()
			if err := proc.Err(); err != nil {
				t.Errorf("%s exited with %v after SIGTERM", leader, err)
			}
		case <-time.After(shutdownGrace + 15*time.Second):
			t.Errorf("%s did not exit within %s of SIGTERM", leader, shutdownGrace+15*time.Second)
		}
		stops = append(stops, stop{at: at, exited: exited, victim: leader, gen: gen, inFlight: fl})
		r.startWorker()
		leader, gen = r.waitLeader(ctx, leader)
	}
	r.waitExecuted(3 * time.Minute)
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "takeover: SIGTERM → the next leader's \"acquired control\"; recovery: SIGTERM → the next leader's mover in control; the handoff (old \"gave up control\" → new \"acquired control\") must fit in one lease poll (1 s + 20 % jitter)"}
	for _, s := range stops {
		f := Fault{Kind: "SIGTERM leader " + s.victim, At: r.since(s.at)}
		old, ok := TermOf(a.terms, s.victim, s.gen)
		if !ok || old.EndReason != "gave up" {
			t.Errorf("%s (generation %d) did not log giving up control after SIGTERM: %+v", s.victim, s.gen, old)
		}
		next, d, ok := takeoverAfter(a, s.at, s.victim)
		if !ok {
			t.Errorf("no takeover after the SIGTERM of %s", s.victim)
			res.Faults = append(res.Faults, f)
			continue
		}
		f.Takeover = Duration(d)
		if !next.MoverStart.IsZero() {
			f.Recovery = Duration(next.MoverStart.Sub(s.at))
		}
		handoff := next.Start.Sub(old.End)
		limit := leasePoll*6/5 + 500*time.Millisecond
		if short {
			// make test runs other packages' tests on the same two cores.
			limit += 2 * time.Second
		}
		if handoff > limit {
			t.Errorf("handoff from %s to %s took %s after the release (limit: one poll with jitter, %s, + 0.5 s)", s.victim, next.Worker, round(handoff), limit)
		}
		finished := 0
		ends := map[string]bool{}
		for _, x := range a.records {
			if x.Worker == s.victim && x.Phase == "end" {
				ends[x.ID] = true
			}
		}
		for _, id := range s.inFlight {
			if ends[id] {
				finished++
			} else {
				t.Errorf("task %s was in flight on %s at SIGTERM and did not finish there", id, s.victim)
			}
		}
		f.Detail = fmt.Sprintf("handoff %s after the release; %d/%d in-flight tasks finished; exited %s after SIGTERM",
			round(handoff), finished, len(s.inFlight), round(s.exited.Sub(s.at)))
		res.Faults = append(res.Faults, f)
	}
	r.report(a, res, 1)
}

// waitUntil polls cond every 100 ms for up to d.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestRoutesChaos: tasks spread over a named queue and the default one,
// the four priority levels and three tenants' fairness lanes (issue 39),
// due over 60 s on three workers that consume both queues; the worker with
// the most tasks in flight is SIGKILLed, then the leader. Nothing may be
// lost: every level and lane a replacement worker has never seen is found
// by its listing, and every task runs.
func TestRoutesChaos(t *testing.T) {
	r := newRun(t, "14 pools, priorities and fairness lanes through SIGKILLs", false, 3,
		map[string]any{"worker": map[string]any{"queues": []string{"default", "pool"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	leader, _ := r.waitLeader(ctx, "")
	base := time.Now().Add(5 * time.Second)
	var items []leasecron.Item
	for i, id := range ids("q", 0, 900) {
		it := leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(60 * time.Second)))),
			Priority: i%4 + 1, FairKey: fmt.Sprintf("tenant-%d", i%3)}
		if i%2 == 0 {
			it.Queue = "pool"
		}
		items = append(items, it)
	}
	if failed := r.schedule(ctx, items, 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	time.Sleep(time.Until(base.Add(8 * time.Second)))
	res := Result{RecoveryRule: "every task runs: SIGKILL of the worker with the most tasks in flight, then of the leader; replacements find the levels and lanes in use by listing the queues"}
	victim, most := "", -1
	rs := r.records()
	for _, n := range r.f.Names() {
		if n == leader {
			continue
		}
		if k := len(inFlight(rs, n, time.Now())); k > most {
			victim, most = n, k
		}
	}
	at := r.kill(victim)
	res.Faults = append(res.Faults, Fault{Kind: "SIGKILL worker " + victim, At: r.since(at), Detail: fmt.Sprintf("%d tasks in flight", most)})
	r.startWorker()
	time.Sleep(time.Until(base.Add(25 * time.Second)))
	at = r.kill(leader)
	res.Faults = append(res.Faults, Fault{Kind: "SIGKILL leader " + leader, At: r.since(at)})
	r.startWorker()
	r.waitLeader(ctx, leader)
	r.waitExecuted(4 * time.Minute)
	a := r.stopAndAnalyse()
	r.report(a, res, 1)
}

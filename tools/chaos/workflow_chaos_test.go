//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestWorkflowChaos is scenario 12: chains of three 2-second tasks (each step
// waiting for the one before) and a batch with a completion callback run
// on three workers while non-leader workers with tasks in flight are
// SIGKILLed every few seconds and, midway, the leader (which also watches
// the parents that were already queued). Nothing is lost, no step starts
// before the step it waits for has ended, and the callback runs once with
// the counts of the whole batch.
func TestWorkflowChaos(t *testing.T) {
	const chains, members, kills = 40, 300, 6
	r := newRun(t, "12 workflows (chains and a batch) under worker and leader SIGKILLs", false, 3, map[string]any{
		"handlers": map[string]any{
			"cb": map[string]any{"exec": []string{"/bin/sh", "-c",
				`printf '%s %s %s %s %s start\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"; ` +
					`printf '%s %s\n' "$LEASECRON_TASK_ID" "$LEASECRON_BATCH_COUNTS" >> "$FLEET_RECORD.cb"`}},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	leader, _ := r.waitLeader(ctx, "")
	base := time.Now().Add(3 * time.Second)
	window := 25 * time.Second
	// The batch: members due over the window, the callback once all ended.
	var items []leasecron.Item
	for _, id := range ids("bm", 0, members) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(window))))})
	}
	res, err := r.cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{Batch: "chaosbatch", OnComplete: &leasecron.Item{ID: "chaosbatch-done", Type: "cb"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		r.ack(x.Item.ID, x.Item.Due)
	}
	r.ack("chaosbatch-done", base)
	// The chains, one call per step: the first step is often in the queue
	// already when the second is scheduled, and the second waiting when
	// the third is.
	var steps [][]string
	for c := range chains {
		// Named as the harness's slow tasks, so a kill sees them in flight.
		ch := []string{fmt.Sprintf("%sch%02d-a", slowPrefix, c), fmt.Sprintf("%sch%02d-b", slowPrefix, c), fmt.Sprintf("%sch%02d-c", slowPrefix, c)}
		for k, id := range ch {
			it := leasecron.Item{ID: id, Type: "recslow", Payload: "2", Due: base.Add(time.Duration(rand.Int64N(int64(window))))}
			if k > 0 {
				it.After = ch[k-1 : k]
			}
			out, err := r.cl.Schedule(ctx, it, nil)
			if err != nil {
				t.Fatalf("schedule %s: %v", id, err)
			}
			r.ack(out.ID, out.Due)
		}
		steps = append(steps, ch)
	}
	time.Sleep(time.Until(base.Add(2 * time.Second)))
	alive := map[string]bool{}
	for _, n := range r.f.Names() {
		alive[n] = true
	}
	type kill struct {
		at       time.Time
		victim   string
		leader   bool
		inFlight []string
	}
	var done []kill
	for k := range kills {
		time.Sleep(4 * time.Second)
		h, err := r.f.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		victim := ""
		if k == kills/2 {
			victim = h.Holder
		} else {
			most := -1
			rs := r.records()
			for n := range alive {
				if n == h.Holder {
					continue
				}
				if c := len(inFlight(rs, n, time.Now())); c > most {
					victim, most = n, c
				}
			}
		}
		at := r.kill(victim)
		delete(alive, victim)
		done = append(done, kill{at: at, victim: victim, leader: victim == h.Holder, inFlight: inFlight(r.records(), victim, at)})
		alive[r.startWorker()] = true
		if victim == leader {
			leader, _ = r.waitLeader(ctx, leader)
		}
	}
	r.waitExecuted(4 * time.Minute)
	a := r.stopAndAnalyse()
	// No step started before the step it waits for had ended (its first
	// recorded end: an attempt cut short by a kill records none).
	starts, ends := fleet.Starts(a.records), fleet.Ends(a.records)
	early := 0
	for _, ch := range steps {
		for k := 1; k < len(ch); k++ {
			s, e := starts[ch[k]], ends[ch[k-1]]
			if len(s) == 0 {
				continue // reported lost
			}
			if len(e) == 0 || s[0].At.Before(e[0].At) {
				early++
				t.Errorf("%s started at %s before %s ended (%v)", ch[k], s[0].At.Format(time.RFC3339Nano), ch[k-1], e)
			}
		}
	}
	// The callback ran once, with the whole batch's counts.
	b, err := os.ReadFile(r.f.RecordFile + ".cb")
	if err != nil {
		t.Errorf("the callback never ran: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var counts leasecron.BatchCounts
	if len(lines) != 1 {
		t.Errorf("the callback ran %d times: %q", len(lines), lines)
	} else if _, js, _ := strings.Cut(lines[0], " "); json.Unmarshal([]byte(js), &counts) != nil || counts != (leasecron.BatchCounts{Total: members, Succeeded: members}) {
		t.Errorf("the callback got %q, want %d members succeeded", lines[0], members)
	}
	r.note("%d chains of 3 and a batch of %d: %d steps started before the step they wait for had ended; the callback ran %d time(s) with %+v", chains, members, early, len(lines), counts)
	out := Result{RecoveryRule: "takeover (the leader): SIGKILL → the next term of control; recovery: SIGKILL → every task in flight on the killed worker has started again elsewhere. Every chain must run whole and in order, the callback once with the batch's counts"}
	for _, k := range done {
		f := Fault{Kind: "SIGKILL worker " + k.victim, At: r.since(k.at)}
		if k.leader {
			f.Kind = "SIGKILL leader " + k.victim
			if _, d, ok := takeoverAfter(a, k.at, k.victim); ok {
				f.Takeover = Duration(d)
			}
		}
		var worst time.Duration
		for _, id := range k.inFlight {
			if x, ok := FirstStartAfter(a.records, k.at, func(x fleet.Record) bool { return x.ID == id && x.Worker != k.victim }); ok {
				worst = max(worst, x.At.Sub(k.at))
			}
		}
		f.Recovery = Duration(worst)
		f.Detail = fmt.Sprintf("%d tasks in flight", len(k.inFlight))
		out.Faults = append(out.Faults, f)
	}
	r.report(a, out, 1)
}

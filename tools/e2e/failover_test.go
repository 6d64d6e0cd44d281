package e2e

import (
	"context"
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// Three workers with a 15 s lease and otherwise default settings (lease
// poll 15 s, mover pass 5 s, idle queue polls up to 30 s apart). Tasks are
// scheduled at least lease + lease poll ahead, so the leader has enqueued
// them early, invisible until due, before it is SIGKILLed as they come due.
// They start on time through the failover (the leader published their due
// times in the lease metadata, so the other workers' consumers look for
// them), none is lost, none runs twice or early. Tasks cancelled after their
// early enqueue never run; tasks rescheduled after it run once, at their new
// time.
func TestFailoverEarlyEnqueueThroughLeaderKill(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3, map[string]any{
		"lease":  map[string]any{"duration": "15s", "poll_every": "15s"},
		"mover":  map[string]any{"poll_every": "5s"},
		"worker": map[string]any{"poll_max": "30s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leader, err := f.WaitLeader(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	// 60 tasks due 35–64.5 s ahead, one every 0.5 s; the early window is
	// lease.duration + lease.poll_every = 30 s.
	start := time.Now().Add(35 * time.Second)
	var items []leasecron.Item
	for i := range 60 {
		items = append(items, leasecron.Item{ID: fmt.Sprintf("fo%02d", i), Type: "rec", Due: start.Add(time.Duration(i) * 500 * time.Millisecond)})
	}
	dues := scheduleAll(ctx, t, cl, items)
	cancelled := []string{"fo02", "fo05", "fo08", "fo11", "fo14"}
	moved := map[string]time.Time{}
	for _, id := range []string{"fo03", "fo06", "fo09", "fo12", "fo15"} {
		moved[id] = dues[id].Add(12 * time.Second)
	}
	// Wait until they are in the queue (sent early), then change them.
	for _, id := range append(append([]string{}, cancelled...), keys(moved)...) {
		waitSent(ctx, t, cl, id)
	}
	for _, id := range cancelled {
		if _, err := cl.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s after its early enqueue: %v", id, err)
		}
	}
	for id, due := range moved {
		if _, err := cl.Reschedule(ctx, id, due); err != nil {
			t.Fatalf("reschedule %s after its early enqueue: %v", id, err)
		}
		dues[id] = due
	}
	t.Logf("changed 5 cancelled and 5 rescheduled tasks %s before the first is due", time.Until(start).Round(time.Millisecond))

	// The kill comes just before the first task is due: a worker killed
	// holding a message it had just taken is late by that message's
	// visibility timeout whoever leads, which is not what this measures.
	time.Sleep(time.Until(start.Add(-300 * time.Millisecond)))
	killed := time.Now()
	f.Signal(leader.Holder, syscall.SIGKILL)
	next, err := f.WaitLeader(ctx, leader.Holder)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of leader %s 300 ms before the first task came due; %s leads %s later", leader.Holder, next.Holder, time.Since(killed).Round(time.Millisecond))

	var want []string
	skip := map[string]bool{}
	for _, id := range cancelled {
		skip[id] = true
	}
	for _, it := range items {
		if !skip[it.ID] {
			want = append(want, it.ID)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if missing, err := f.WaitRecords(wctx, want); err != nil {
		t.Fatalf("%d of %d tasks never ran (%v): %v", len(missing), len(want), err, head(missing, 20))
	}
	time.Sleep(5 * time.Second) // let a stale message that should not run show itself
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts := fleet.Starts(rs)
	var lateness []time.Duration
	for _, id := range want {
		r := starts[id]
		if len(r) != 1 {
			t.Errorf("%s ran %d times", id, len(r))
		}
		if !r[0].Due.Equal(dues[id]) {
			t.Errorf("%s ran for due %s, want %s (its rescheduled time)", id, r[0].Due.Format(time.StampMilli), dues[id].Format(time.StampMilli))
		}
		for _, x := range r {
			if x.At.Before(dues[id]) {
				t.Errorf("%s started %s before its due time", id, dues[id].Sub(x.At))
			}
		}
		lateness = append(lateness, r[0].At.Sub(dues[id]))
	}
	for _, id := range cancelled {
		if n := len(starts[id]); n != 0 {
			t.Errorf("%s, cancelled after its early enqueue, ran %d times", id, n)
		}
	}
	sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
	p50, p99 := fleet.Percentile(lateness, 50), fleet.Percentile(lateness, 99)
	t.Logf("%d tasks through the leader's SIGKILL: lateness p50 %s, p99 %s, max %s; 5 cancelled never ran; 5 rescheduled ran once at their new time",
		len(want), p50.Round(time.Millisecond), p99.Round(time.Millisecond), lateness[len(lateness)-1].Round(time.Millisecond))
	// Liveness, generous for a loaded two-core machine (unloaded: p99
	// about 20 ms; under make test's full load it reached 1.2 s and 2.4 s):
	// a task that waited for the next leader instead of its early message
	// would be late by the takeover, 10 s or more here.
	if p99 > 5*time.Second {
		t.Errorf("lateness p99 %s, want at most 5 s (a task left for the next leader is late by its takeover, 10 s or more)", p99.Round(time.Millisecond))
	}
}

func keys(m map[string]time.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// waitSent waits until the mover has sent id's message early.
func waitSent(ctx context.Context, t *testing.T, cl *leasecron.Client, id string) {
	t.Helper()
	for {
		it, err := cl.Get(ctx, id)
		if err == nil && it.Sent {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s was not sent early: %+v, %v", id, it, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

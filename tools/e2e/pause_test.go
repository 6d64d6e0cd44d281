package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestPauseAcrossFleet: three workers; `leasecron pause recslow`, then
// recslow and rec tasks are scheduled. For 20 s the rec tasks flow (a
// second batch halfway) while no recslow task runs anywhere; then
// `leasecron resume recslow` and every recslow task runs once, as its
// first attempt, with nothing dead-lettered.
func TestPauseAcrossFleet(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := leaderClient(ctx, t, f)
	lcCLI(ctx, t, f, "pause", "recslow")
	var listed []leasecron.Pause
	if err := json.Unmarshal([]byte(lcCLI(ctx, t, f, "paused", "--json")), &listed); err != nil || len(listed) != 1 || listed[0].Type != "recslow" || !listed[0].Until.IsZero() {
		t.Fatalf("paused --json = %+v, %v; want recslow until resumed", listed, err)
	}

	batch := func(prefix, typ, payload string, n int) []leasecron.Item {
		var items []leasecron.Item
		for i := range n {
			items = append(items, leasecron.Item{ID: fmt.Sprintf("%s%02d", prefix, i), Type: typ, Payload: payload, Due: time.Now()})
		}
		return items
	}
	paused := batch("held", "recslow", "0", 15)
	flowA, flowB := batch("flowa", "rec", "", 10), batch("flowb", "rec", "", 10)
	began := time.Now()
	scheduleAll(ctx, t, cl, append(append([]leasecron.Item{}, paused...), flowA...))
	wait := func(items []leasecron.Item, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, limit)
		defer wcancel()
		if missing, err := f.WaitRecords(wctx, ids(items)); err != nil {
			t.Fatalf("%d tasks never ran (%v): %v", len(missing), err, head(missing, 10))
		}
		return time.Since(start)
	}
	wait(flowA, 30*time.Second)
	select { // the second batch halfway through the pause
	case <-time.After(time.Until(began.Add(10 * time.Second))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	scheduleAll(ctx, t, cl, flowB)
	wait(flowB, 30*time.Second)
	select {
	case <-time.After(time.Until(began.Add(20 * time.Second))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if strings.HasPrefix(r.ID, "held") {
			t.Fatalf("paused task %s ran on %s at %s, %s after the pause began", r.ID, r.Worker, r.At.Format(time.RFC3339Nano), r.At.Sub(began))
		}
	}
	for _, it := range paused {
		st, err := cl.Status(ctx, it.ID)
		if err != nil || st.Run == nil || st.Run.Attempts != 0 || st.Run.State.Finished() {
			t.Fatalf("status of paused %s after 20 s: %+v %+v, %v; want waiting with no attempt", it.ID, st, st.Run, err)
		}
	}
	t.Logf("20 s paused: 20 rec tasks ran, no recslow task did")

	lcCLI(ctx, t, f, "resume", "recslow")
	took := wait(paused, 60*time.Second)
	t.Logf("every paused task started within %s of the resume", took.Round(time.Millisecond))
	if missing, err := f.WaitEnds(ctx, ids(paused)); err != nil {
		t.Fatalf("paused tasks never finished: %v", missing)
	}
	starts := map[string]int{}
	rs, _ = f.Records()
	for _, r := range rs {
		if r.Phase == "start" {
			starts[r.ID]++
		}
	}
	for _, it := range paused {
		if starts[it.ID] != 1 {
			t.Errorf("%s started %d times, want once", it.ID, starts[it.ID])
		}
		lcWaitStatus(ctx, t, f, it.ID, 30*time.Second, "succeeded as the first attempt", func(s lcStatus) bool {
			return s.Run != nil && s.Run.State == "succeeded" && s.Run.Attempts == 1
		})
	}
	var dead []json.RawMessage
	if err := json.Unmarshal([]byte(lcCLI(ctx, t, f, "deadletter", "list", "--json")), &dead); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters after the pause: %d (%v), want none", len(dead), err)
	}
	if out, _, code := lcRun(ctx, f, nil, "resume", "recslow"); code != 3 {
		t.Fatalf("resume of a type no longer paused: exit %d (%s), want 3", code, out)
	}
}

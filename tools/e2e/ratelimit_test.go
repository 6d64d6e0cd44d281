package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestRateLimits: five worker processes and a backlog of tasks due now of
// a type limited to COUNT/WINDOW: run history never shows more than COUNT
// starts in any sliding window, the budget is used (at least 90 % of what
// the window allows over the run), every task runs once at attempt 1; and
// with rate_key, each of three keys has a budget of its own. make test
// runs it at 5/5 s; make test-long also at the 10/1 m with 100
// tasks over five minutes.
func TestRateLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		count  int
		per    time.Duration
		tasks  int
		long   bool
		keyed  int // tasks per key of the keyed type (3 keys)
		keyCnt int
	}{
		{"5 per 5s", 5, 5 * time.Second, 20, false, 4, 2},
		{"10 per 1m", 10, time.Minute, 100, true, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && os.Getenv("LEASECRON_LONG") == "" {
				t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
			}
			t.Parallel()
			runRateLimits(t, c.count, c.per, c.tasks, c.keyed, c.keyCnt)
		})
	}
}

func runRateLimits(t *testing.T, count int, per time.Duration, tasks, keyed, keyCount int) {
	rate := fmt.Sprintf("%d/%s", count, per)
	base := fleet.BaseConfig("")
	recHandler := base["handlers"].(map[string]any)["rec"]
	cfg := map[string]any{
		"limits":   map[string]any{"rec": map[string]any{"rate": rate}},
		"handlers": map[string]any{"reck": recHandler},
	}
	if keyed > 0 {
		cfg["limits"].(map[string]any)["reck"] = map[string]any{"rate": fmt.Sprintf("%d/%s", keyCount, per), "rate_key": "payload.customer"}
	}
	f := startFleet(t, 5, cfg)
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	budget := time.Duration(tasks/count+2)*per + 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var items []leasecron.Item
	var ids, keyedIDs []string
	for i := range tasks {
		id := fmt.Sprintf("r%03d", i)
		items, ids = append(items, leasecron.Item{ID: id, Type: "rec", Due: time.Now()}), append(ids, id)
	}
	customerOf := map[string]string{}
	for k := range 3 {
		for i := range keyed {
			id := fmt.Sprintf("k%d-%02d", k, i)
			customerOf[id] = fmt.Sprint("c", k)
			items = append(items, leasecron.Item{ID: id, Type: "reck", Due: time.Now(), Payload: fmt.Sprintf(`{"customer":"c%d"}`, k)})
			keyedIDs = append(keyedIDs, id)
		}
	}
	if res, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatalf("schedule: %v %+v", err, res)
	}
	// A task behind the budget says why it waits before it starts.
	for seen := false; !seen; {
		for _, id := range ids {
			st, err := cl.Status(ctx, id)
			if err == nil && st.Run != nil && st.Run.State == leasecron.RunSnoozed && strings.Contains(st.Run.OutputTail, "waiting for the rate limit of rec") {
				seen = true
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no task behind the budget said why it waited")
		}
	}
	if missing, err := f.WaitRecords(ctx, append(slices.Clone(ids), keyedIDs...)); err != nil {
		t.Fatalf("%d tasks never started: %v (%v)", len(missing), missing, err)
	}
	// Run history: when each started, at which attempt.
	started := map[string]time.Time{}
	for _, id := range append(slices.Clone(ids), keyedIDs...) {
		st, err := cl.Status(ctx, id)
		if err != nil || st.Run == nil {
			t.Fatalf("status %s: %+v %v", id, st, err)
		}
		if st.Run.Attempts != 1 || st.Run.LastError != "" {
			t.Errorf("%s ran at attempt %d (last error %q): waiting for the budget used an attempt", id, st.Run.Attempts, st.Run.LastError)
		}
		started[id] = st.Run.Started
	}
	recs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, r := range recs {
		if r.Phase == "start" {
			runs[r.ID]++
		}
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	// Never more than count starts in any sliding window of run history.
	times := func(ids []string) []time.Time {
		var out []time.Time
		for _, id := range ids {
			out = append(out, started[id])
		}
		slices.SortFunc(out, time.Time.Compare)
		return out
	}
	maxIn := func(ts []time.Time) int {
		most := 0
		for i := range ts {
			n := 0
			for _, u := range ts[i:] {
				if u.Sub(ts[i]) < per {
					n++
				}
			}
			most = max(most, n)
		}
		return most
	}
	ts := times(ids)
	if n := maxIn(ts); n > count {
		t.Errorf("%d starts within %s, the limit is %d", n, per, count)
	}
	// The budget is used: the tasks took about as many windows as they
	// needed (ceil(tasks/count)-1 after the first burst), each widened by
	// the limiter's 1 s margin and half its jitter (a tenth of the
	// window, at random) on average, plus a quarter for a loaded machine.
	span := ts[len(ts)-1].Sub(ts[0])
	windows := time.Duration((tasks+count-1)/count - 1)
	need := windows * per
	if span > windows*(per+time.Second+per/20)*5/4+3*time.Second {
		t.Errorf("%d tasks took %s from first to last start; %s at %s would do", tasks, span.Round(time.Second), need, rate)
	}
	inFive := 0
	for _, u := range ts {
		if u.Sub(ts[0]) < 5*per {
			inFive++
		}
	}
	t.Logf("%d tasks at %s: first to last start %s (the limit allows %s); most in one window %d; %d starts in the first five windows (the limit allows %d)",
		tasks, rate, span.Round(100*time.Millisecond), need, maxIn(ts), inFive, 5*count)
	if keyed == 0 {
		return
	}
	byKey := map[string][]string{}
	for _, id := range keyedIDs {
		byKey[customerOf[id]] = append(byKey[customerOf[id]], id)
	}
	for k, ids := range byKey {
		if n := maxIn(times(ids)); n > keyCount {
			t.Errorf("key %s: %d starts within %s, its limit is %d", k, n, per, keyCount)
		}
	}
	// Each key its own budget: in the first window, more starts than one
	// key's budget.
	all := times(keyedIDs)
	if n := maxIn(all); n <= keyCount {
		t.Errorf("at most %d keyed starts in a window: the keys shared one budget of %d", n, keyCount)
	}
}

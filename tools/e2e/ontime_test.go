package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestOnTimeDelivery: with the default polling (an idle worker polls the
// queue every 30 s at most, the leader looks for due rows every 5 s), rows
// due between polls still start on time: the mover enqueues them early with
// a delay rounded down to whole seconds, wakes its own consumer for each,
// and a consumer holding a message before its due time waits for it. No
// task may start before its due time.
func TestOnTimeDelivery(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, map[string]any{
		"worker": map[string]any{"poll_max": "30s"},
		"mover":  map[string]any{"poll_every": "5s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// Let the consumers' polling back off towards poll_max first.
	time.Sleep(5 * time.Second)

	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	start := time.Now().Add(5 * time.Second)
	items := make([]leasecron.Item, n)
	for i := range items {
		due := start.Add(time.Duration(i)*25*time.Second/n + time.Duration(rand.Int64N(int64(250*time.Millisecond))))
		items[i] = leasecron.Item{ID: fmt.Sprintf("ot%03d", i), Type: "rec", Due: due}
	}
	dues := scheduleAll(ctx, t, cl, items)
	if late := time.Since(start); late > 0 {
		t.Logf("warning: scheduling ended %s after the first due time", late.Round(time.Millisecond))
	}

	var want []string
	for _, it := range items {
		want = append(want, it.ID)
	}
	wctx, wcancel := context.WithTimeout(ctx, 25*time.Second+90*time.Second)
	defer wcancel()
	if missing, err := f.WaitRecords(wctx, want); err != nil {
		t.Fatalf("%d of %d tasks never ran (%v): %v", len(missing), n, err, head(missing, 20))
	}
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts := fleet.Starts(rs)
	var lateness []time.Duration
	early, overOne, dups := 0, 0, 0
	perWorker := map[string]int{}
	for _, id := range want {
		r := starts[id]
		dups += len(r) - 1
		perWorker[r[0].Worker]++
		for _, x := range r {
			if x.At.Before(dues[id]) {
				early++
				t.Errorf("%s started %s before its due time %s on %s", id, dues[id].Sub(x.At), dues[id].Format(time.StampMilli), x.Worker)
			}
		}
		l := r[0].At.Sub(dues[id])
		lateness = append(lateness, l)
		if l > time.Second {
			overOne++
		}
	}
	overThree := 0
	for _, l := range lateness {
		if l > 3*time.Second {
			overThree++
		}
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("on-time delivery, 2 workers, worker.poll_max 30s, mover.poll_every 5s, %d tasks over 25 s: lateness (handler start - due) p50 %s, p99 %s, max %s; started before due: %d; per worker %v; executions beyond the first: %d",
		n, ms(fleet.Percentile(lateness, 50)), ms(fleet.Percentile(lateness, 99)), ms(fleet.Percentile(lateness, 100)), early, perWorker, dups)
	t.Logf("rows due between polls visible within 1 s: %d of %d tasks started more than 1 s after their due time", overOne, n)
	// Alone on a 2-core machine 0 of 100 are over 1 s (max about 280 ms);
	// beside the rest of make test's end-to-end tests and Chromium up to 10
	// of 100 were (max 2.9 s), and 19 with six end-to-end tests at a time;
	// on CI's loaded 2-core machine once 7 (3 over 3 s, max 3.6 s, while
	// the handler's printf took up to 1 s to run). Before the fix a row due
	// between polls waited for the next pass, up to poll_every (5 s) late:
	// 35 of 100 were over 1 s. The bounds are liveness bounds, generous for
	// a loaded machine, that the defect still fails; the latency itself is
	// measured by make bench against a baseline.
	if overOne > n/4 || overThree > n/20 {
		t.Errorf("%d of %d tasks started more than 1 s late and %d more than 3 s late; want at most 25 %% over 1 s and 5 %% over 3 s", overOne, n, overThree)
	}
}

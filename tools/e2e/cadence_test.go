package e2e

import (
	"context"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// occurrences returns the first start of every occurrence of series, by
// due time, failing on an occurrence that ran twice or before its due time.
func occurrences(t *testing.T, f *fleet.Fleet, series string) (dues, starts []time.Time) {
	t.Helper()
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	type occ struct{ due, start time.Time }
	seen := map[string]occ{}
	for _, r := range rs {
		if r.Phase != "start" || !strings.HasPrefix(r.ID, series+"@") {
			continue
		}
		if _, dup := seen[r.ID]; dup {
			t.Errorf("occurrence %s ran twice", r.ID)
			continue
		}
		if due, err := time.Parse(time.RFC3339, strings.TrimPrefix(r.ID, series+"@")); err != nil {
			t.Errorf("occurrence id %q: want %s@<RFC3339>: %v", r.ID, series, err)
		} else if !due.Equal(r.Due) {
			t.Errorf("occurrence %s ran with due %v", r.ID, r.Due)
		}
		if r.At.Before(r.Due) {
			t.Errorf("occurrence %s started %s before its due time", r.ID, r.Due.Sub(r.At))
		}
		seen[r.ID] = occ{r.Due, r.At}
	}
	var all []occ
	for _, o := range seen {
		all = append(all, o)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].due.Before(all[j].due) })
	for _, o := range all {
		dues, starts = append(dues, o.due), append(starts, o.start)
	}
	return dues, starts
}

// seriesAcrossSIGTERM schedules an @every series called id once f has a
// leader, stops that leader with SIGTERM after stopAfter and waits for the
// next; it returns when the series was scheduled.
func seriesAcrossSIGTERM(ctx context.Context, t *testing.T, f *fleet.Fleet, every, id string, stopAfter time.Duration) time.Time {
	t.Helper()
	first, err := f.WaitLeader(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	lcCLI(ctx, t, f, "schedule", "--every", every, "--id", id, "--type", "rec")
	began := time.Now()
	time.Sleep(stopAfter)
	f.Signal(first.Holder, syscall.SIGTERM)
	next, err := f.WaitLeader(ctx, first.Holder)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s stopped at +%s; %s leads %s later (generation %d -> %d)", first.Holder, stopAfter,
		next.Holder, time.Since(began.Add(stopAfter)).Round(time.Millisecond), first.Generation, next.Generation)
	return began
}

// An @every 2s series with the default mover settings (a pass every 5 s)
// runs every occurrence — each at its own time, none lost, none doubled —
// for 30 s, across a leader that stops with SIGTERM and the standby that
// takes over up to lease.poll_every later.
func TestCadenceEvery2sAcrossSIGTERM(t *testing.T) {
	// Long (make test-long): minutes of waiting that make test's 15-minute
	// budget cannot afford.
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	f := startFleet(t, 3, map[string]any{
		"lease": map[string]any{"duration": "15s", "poll_every": "5s"},
		"mover": map[string]any{"poll_every": "5s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := seriesAcrossSIGTERM(ctx, t, f, "2s", "beat", 12*time.Second)
	time.Sleep(time.Until(began.Add(36 * time.Second)))

	dues, starts := occurrences(t, f, "beat")
	// The 30 s after the first occurrence.
	var in []time.Time
	var lateness []time.Duration
	for i, d := range dues {
		if d.Before(dues[0].Add(30 * time.Second)) {
			in = append(in, d)
			lateness = append(lateness, starts[i].Sub(d))
		}
	}
	if len(in) != 15 {
		t.Fatalf("%d occurrences due in the first 30 s, want 15 (every 2 s): %v", len(in), in)
	}
	for i := 1; i < len(in); i++ {
		if gap := in[i].Sub(in[i-1]); gap != 2*time.Second {
			t.Errorf("occurrences due %s and %s are %s apart, want 2s", in[i-1].Format(time.TimeOnly), in[i].Format(time.TimeOnly), gap)
		}
	}
	// The first occurrence is due on the next whole second after
	// scheduling and waits for the next pass (up to 5 s); every later one
	// was enqueued ahead, invisible until its own time.
	if lateness[0] > 7*time.Second {
		t.Errorf("the first occurrence started %s late, more than a pass", lateness[0].Round(time.Millisecond))
	}
	maxLate := time.Duration(0)
	for i, l := range lateness[1:] {
		maxLate = max(maxLate, l)
		if l > 3*time.Second { // a liveness bound, generous for a loaded machine
			t.Errorf("occurrence due %s started %s late", in[i+1].Format(time.TimeOnly), l.Round(time.Millisecond))
		}
	}
	t.Logf("beat: 15 occurrences 2 s apart in 30 s across the handover; the first %s late (scheduled between passes), the others p50 %s, max %s",
		lateness[0].Round(time.Millisecond), fleet.Percentile(lateness[1:], 50).Round(time.Millisecond), maxLate.Round(time.Millisecond))
}

package runs

import (
	"testing"
	"time"
)

// A finished run is its id's end unless another scheduling of the id
// waits beside it to start — and then only until BehindWait has passed
// since the run ended, so that an entry whose message is gone does not
// hold what waits for the id for good.
func TestEndOfIDWaitsForASchedulingBesideTheRun(t *testing.T) {
	ended := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	r := newRun("a", Running)
	r.Due = ended.Add(-time.Minute)
	if r.EndOfID(ended) {
		t.Fatal("a running run is its id's end")
	}
	if !r.noteBehind(ended.Add(-time.Second)) {
		t.Fatal("the scheduling moved beside the run was not noted")
	}
	r.State, r.Finished = Succeeded, ended
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {BehindWait, false}, {BehindWait + time.Second, true}} {
		if got := r.EndOfID(ended.Add(c.at)); got != c.want {
			t.Errorf("%v after the run ended with a scheduling beside it: end of the id %v, want %v", c.at, got, c.want)
		}
	}
	r.started(ended.Add(-time.Second))
	if !r.EndOfID(ended) {
		t.Error("with the scheduling beside it started (its own record now), the run is not its id's end")
	}
}

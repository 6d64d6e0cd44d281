package runs

import (
	"testing"
	"time"
)

// A finished run is its id's end unless another scheduling of the id
// waits beside it to start — and then only until BehindWait has passed
// since that scheduling's due time, so that an entry whose message is
// gone does not hold what waits for the id for good, on this record or
// the id's later ones.
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
	// The entry counts for BehindWait after its own due time (a second
	// before the run ended), however long ago the record's run ended.
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {BehindWait - time.Second, false}, {BehindWait + time.Second, true}} {
		if got := r.EndOfID(ended.Add(c.at)); got != c.want {
			t.Errorf("%v after the run ended with a scheduling beside it: end of the id %v, want %v", c.at, got, c.want)
		}
	}
	// A later record of the id keeps an entry nothing cleared: it does not
	// hold that record's end once its due time is BehindWait old.
	next := successor(&r, "a", Queued)
	next.State, next.Finished = Succeeded, ended.Add(3*BehindWait)
	if !next.EndOfID(ended.Add(3 * BehindWait)) {
		t.Error("a stale entry carried to a later record holds that record's end")
	}
	r.started(ended.Add(-time.Second))
	if !r.EndOfID(ended) {
		t.Error("with the scheduling beside it started (its own record now), the run is not its id's end")
	}
}

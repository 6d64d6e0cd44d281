package runs

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Sample returns a generated run history of n runs for tests and
// benchmarks (write it with Import): due times 7 s apart going back from
// base, newest first, each run finished 3 s after it was due; mostly
// succeeded one-off runs of three types, with 5 % failed, 2 % dead, 0.5 %
// cancelled, 0.1 % running, 0.4 % queued and 2.5 % occurrences of the
// series "nightly".
func Sample(base time.Time, n int) []Run {
	out := make([]Run, 0, n)
	for i := 0; i < n; i++ {
		due := base.Add(-time.Duration(i) * 7 * time.Second)
		r := Run{Run: leasecrontype.Run{ID: fmt.Sprintf("task-%06d", i), Type: []string{"mail", "report", "sync"}[i%3], Due: due,
			Attempts: 1, Worker: "w" + strconv.Itoa(i%5), Started: due.Add(time.Second), Finished: due.Add(3 * time.Second), State: Succeeded}}
		switch {
		case i%20 == 3:
			r.State, r.LastError, r.Attempts = Failed, fmt.Sprintf("attempt of %d failed", i), 2
		case i%50 == 7:
			r.State, r.LastError, r.Attempts = Dead, "gave up", 5
		case i%200 == 11:
			r.State = Cancelled
		case i%1000 == 13:
			r.State, r.Finished, r.ClaimUntil = Running, time.Time{}, base.Add(time.Hour)
		case i%250 == 17:
			r.State, r.Finished, r.Started, r.Attempts, r.Worker = Queued, time.Time{}, time.Time{}, 0, ""
		case i%40 == 19:
			r.ID, r.Series, r.Type = OccurrenceID("nightly", due), "nightly", "report"
		}
		out = append(out, r)
	}
	return out
}

// Newest returns the ids of the first n runs of rs (newest first, as
// Sample makes them) that keep accepts.
func Newest(rs []Run, n int, keep func(Run) bool) []string {
	var out []string
	for _, r := range rs {
		if len(out) == n {
			break
		}
		if keep(r) {
			out = append(out, r.ID)
		}
	}
	return out
}

// Expired reports whether r is past its retention at now (what Clean
// removes and reads hide).
func (s *Store) Expired(r Run, now time.Time) bool { return s.expired(r, now) }

package runs

import (
	"sort"
	"time"
)

// Counts are cumulative outcome counts of one worker instance.
type Counts struct {
	// Handled counts runs whose handler succeeded.
	Handled int64 `json:"handled"`
	// Failed counts failed attempts (errors, panics, timeouts), including
	// the last one of a run that went dead.
	Failed int64 `json:"failed"`
	// Retried counts failed attempts that were scheduled for another try.
	Retried int64 `json:"retried"`
	// Dead counts runs given up and set aside after their last attempt.
	Dead int64 `json:"dead"`
	// Duplicates counts deliveries acknowledged without running because the
	// run had already succeeded.
	Duplicates int64 `json:"duplicates"`
	// Cancelled counts deliveries acknowledged without running because the
	// run was cancelled.
	Cancelled int64 `json:"cancelled"`
	// SetAside counts messages moved to the poison queue (malformed ones and
	// dead runs).
	SetAside int64 `json:"set_aside"`
	// Deferred counts deliveries put back without an attempt (no limiter
	// slot, claimed elsewhere).
	Deferred int64 `json:"deferred"`
	// Abandoned counts deliveries released unfinished at shutdown.
	Abandoned int64 `json:"abandoned"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Handled += o.Handled
	c.Failed += o.Failed
	c.Retried += o.Retried
	c.Dead += o.Dead
	c.Duplicates += o.Duplicates
	c.Cancelled += o.Cancelled
	c.SetAside += o.SetAside
	c.Deferred += o.Deferred
	c.Abandoned += o.Abandoned
}

// Counters is one instance's counters row, or the sum of all of them.
type Counters struct {
	// Instance is the worker instance id; empty for a sum.
	Instance string
	// Updated is when the row was last flushed (the latest of all rows for
	// a sum).
	Updated time.Time
	// Instances is the number of rows summed (1 for a single row).
	Instances int
	// Total sums every type.
	Total Counts
	// ByType holds the counts per task type.
	ByType map[string]Counts
}

// Types returns the type names of ByType, sorted.
func (c Counters) Types() []string {
	out := make([]string, 0, len(c.ByType))
	for k := range c.ByType {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sumCounters adds rows into one Counters.
func sumCounters(rows []Counters) Counters {
	sum := Counters{ByType: map[string]Counts{}}
	for _, r := range rows {
		sum.Instances++
		sum.Total.Add(r.Total)
		if r.Updated.After(sum.Updated) {
			sum.Updated = r.Updated
		}
		for t, c := range r.ByType {
			x := sum.ByType[t]
			x.Add(c)
			sum.ByType[t] = x
		}
	}
	return sum
}

package runs

import (
	"sort"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Counts are one instance's cumulative outcome counts
// (leasecrontype.Counts).
type Counts = leasecrontype.Counts

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

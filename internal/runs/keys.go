package runs

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Buckets is the number of partitions run records are spread over when
// nothing says otherwise (Options.Layout): an unsharded fleet's, a fleet
// of one work queue's until its shard count passes it, and every table
// written before the count could grow. Every row of one run lives in
// one partition, so that each change to a run is one entity-group
// transaction; a listing reads all of them (one query each).
const Buckets = 4

// Layout is how run records are spread over partitions: new records go to
// the FNV hash of their id (or series) modulo Write, "p0".."p{Write-1}";
// Read lists every count records may have been written under (Write among
// them, the others only grown from), so that a lookup tries each of the
// id's partitions, Write's first. Counts only grow, so the partitions of
// every count are among those of the largest.
type Layout struct {
	Write int
	Read  []int
}

// DefaultLayout is the layout of a table whose count never grew.
var DefaultLayout = Layout{Write: Buckets, Read: []int{Buckets}}

// valid reports whether l can place records: a count of at least one to
// write under, that Read holds.
func (l Layout) valid() bool { return l.Write > 0 && slices.Contains(l.Read, l.Write) }

// widest is the largest count of l.Read: its partitions hold every record.
func (l Layout) widest() int { return slices.Max(l.Read) }

// home returns the partition a new record of key (an id, or a series for
// its summary) goes to.
func (l Layout) home(key string) string { return bucketIn(key, l.Write) }

// homes returns the partitions a record of key may be in, the one it is
// written to now first and each other once.
func (l Layout) homes(key string) []string {
	out := []string{l.home(key)}
	for i := len(l.Read) - 1; i >= 0; i-- {
		if pk := bucketIn(key, l.Read[i]); !slices.Contains(out, pk) {
			out = append(out, pk)
		}
	}
	return out
}

// all lists every partition a record may be in.
func (l Layout) all() []string {
	out := make([]string, l.widest())
	for i := range out {
		out[i] = bucketPrefix + strconv.Itoa(i)
	}
	return out
}

// Row-key prefixes of the rows of one run (see doc.go). None of them can
// begin a run id's key by accident: '~' is not allowed in task ids, and the
// run row's own key carries a prefix too.
const (
	prefixRun    = "r~" // run row of a one-off task: r~{id}
	prefixOcc    = "o~" // run row of an occurrence: o~{series}~{inverted due}
	prefixList   = "l~" // time list row: l~{inverted due}~{id}
	prefixState  = "x~" // state list row: x~{state}~{inverted due}~{id}[~{worker hash or token}]
	bucketPrefix = "p"  // bucket partitions: p0 .. p{n-1}
)

// maxTicks is the .NET tick count of 9999-12-31T23:59:59.9999999Z; ticks
// count 100 ns from 0001-01-01T00:00:00Z.
const (
	maxTicks       int64 = 3155378975999999999
	unixEpochTicks int64 = 621355968000000000
)

func ticks(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()*10_000_000 + int64(t.Nanosecond())/100 + unixEpochTicks
}

// inverted renders t so that later times sort first: 19 digits of
// maxTicks − ticks(t). The zero time sorts last.
func inverted(t time.Time) string {
	return fmt.Sprintf("%019d", maxTicks-ticks(t))
}

// invertedAfter is the first key part after every inverted(t') with
// t' ≥ t: a RowKey upper bound for "due at or after t".
func invertedAfter(t time.Time) string {
	return fmt.Sprintf("%019d", maxTicks-ticks(t)+1)
}

// bucketKey returns what a run's partition is the hash of: its series for
// an occurrence (so that a series' history is one partition), its id
// otherwise.
func bucketKey(id string) string {
	if series, _, ok := occurrence(id); ok {
		return series
	}
	return id
}

// bucketIn returns the partition of key among n: "p" and the FNV-1a hash
// of key modulo n.
func bucketIn(key string, n int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return bucketPrefix + strconv.Itoa(int(h.Sum32()%uint32(n)))
}

// occurrence splits an occurrence's run id "{series}@{due}" as the mover
// forms it (due in RFC 3339 UTC with as many fraction digits as needed).
// Any other id, including one that merely contains '@', is not one.
func occurrence(id string) (series string, due time.Time, ok bool) {
	i := strings.LastIndexByte(id, '@')
	if i <= 0 {
		return "", time.Time{}, false
	}
	series = id[:i]
	due, err := time.Parse(time.RFC3339Nano, id[i+1:])
	if err != nil || strings.Contains(series, "~") || OccurrenceID(series, due) != id {
		return "", time.Time{}, false
	}
	return series, due.UTC(), true
}

// OccurrenceID is the run id of a series' occurrence due at due.
func OccurrenceID(series string, due time.Time) string {
	return series + "@" + due.UTC().Format(time.RFC3339Nano)
}

// runKey returns the RowKey of a run's run row: derived from the id alone,
// so that a lookup by id is one point read.
func runKey(id string) string {
	if series, due, ok := occurrence(id); ok {
		return prefixOcc + series + "~" + inverted(due)
	}
	return prefixRun + id
}

// seriesRange is the RowKey range of a series' occurrences, newest first.
func seriesRange(series string) (from, to string) {
	return prefixOcc + series + "~", prefixOcc + series + "~~"
}

// listKey returns the RowKey of a run's time list row.
func listKey(id string, due time.Time) string {
	return prefixList + inverted(due) + "~" + id
}

// stateKey returns the RowKey of a run's state list row. A running run's
// key ends with a tag of the worker that claimed it, so that a claim taken
// over by another worker changes the key and the first worker's one-write
// finish, which deletes its own key, fails instead of overwriting the new
// claim.
func stateKey(st State, id string, due time.Time, worker string) string {
	k := prefixState + string(st) + "~" + inverted(due) + "~" + id
	if st == Queued && worker != "" {
		// An early-sent run confirmed with its token (see supersede.go):
		// the claim of that message takes exactly this row.
		return k + "~" + worker
	}
	if st == Running {
		h := fnv.New32a()
		_, _ = h.Write([]byte(worker))
		k += fmt.Sprintf("~%08x", h.Sum32())
	}
	return k
}

// stateRange is the RowKey range of the state list rows of st.
func stateRange(st State) (from, to string) {
	return prefixState + string(st) + "~", prefixState + string(st) + "~~"
}

// hasStateRow reports whether runs in state st have a state list row:
// every state but succeeded (the bulk, listed from the time rows) and
// scheduled (pending tasks are the schedule table's).
func hasStateRow(st State) bool {
	switch st {
	case Queued, Running, Snoozed, Failed, Dead, Cancelled:
		return true
	}
	return false
}

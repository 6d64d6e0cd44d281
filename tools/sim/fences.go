package sim

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
)

// fences watches the fence rows of the schedule table: every commit a
// mover makes in a shard's partition writes the shard's fence row with
// its fencing token (the lease generation, or the shard's epoch), and only
// while the row still holds what the mover read. The tokens written to one
// partition must therefore never go down: a commit of a lower token after
// a higher one means a deposed mover wrote after its successor.
type fences struct {
	mu   sync.Mutex
	last map[string]int64 // partition → highest token committed
	bad  []fenceViolation
}

type fenceViolation struct {
	at     time.Duration
	detail string
}

// fenceRow is the RowKey of a shard's fence row.
const fenceRow = "~fence"

// scheduleTable is the default schedule table's name.
const scheduleTable = "ScheduledItems"

// runsTable is the run records' table (names.table_runs's default).
const runsTable = "Runs"

func (f *fences) commit(w *World, c memstore.Commit) {
	if c.Table != scheduleTable {
		return
	}
	for _, r := range c.Rows {
		if r.RowKey != fenceRow || r.Deleted {
			continue
		}
		g, ok := tokenOf(r.Props["Generation"])
		if !ok {
			continue
		}
		f.mu.Lock()
		if f.last == nil {
			f.last = map[string]int64{}
		}
		if prev := f.last[c.Partition]; g < prev {
			f.bad = append(f.bad, fenceViolation{at: w.elapsed(), detail: fmt.Sprintf("shard %q: a commit fenced by %d after one fenced by %d", c.Partition, g, prev)})
		} else {
			f.last[c.Partition] = g
		}
		f.mu.Unlock()
	}
}

// tokenOf reads a fence row's Generation as the service stores it.
func tokenOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case float64:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func (w *World) fenceViolations() []fenceViolation {
	w.fence.mu.Lock()
	defer w.fence.mu.Unlock()
	return append([]fenceViolation(nil), w.fence.bad...)
}

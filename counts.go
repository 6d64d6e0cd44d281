package leasecron

import (
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Counts are cumulative outcome counts: handled, failed, retried, dead,
// duplicates suppressed, cancelled, set aside, deferred and abandoned
// deliveries (see leasecrontype.Counts for each field).
type Counts = leasecrontype.Counts

// Counters is the sum of the counters every worker flushes to the Runs
// table (every WorkerOptions.Consumer.CountersEvery, and at shutdown): what
// `leasecron stats` shows.
type Counters struct {
	// Updated is when the most recent worker flushed.
	Updated time.Time `json:"updated,omitzero"`
	// Instances is the number of worker instances summed.
	Instances int `json:"instances"`
	// Total sums every task type.
	Total Counts `json:"total"`
	// ByType holds the counts per task type.
	ByType map[string]Counts `json:"by_type"`
}

func countersOf(c runs.Counters) Counters {
	return Counters{Updated: c.Updated, Instances: c.Instances, Total: c.Total, ByType: c.ByType}
}

// RequestCounts is a snapshot of the storage requests one worker has made:
// every request the Azure SDK sent, retries included (Azure bills each as a
// transaction).
type RequestCounts struct {
	// Total is the number of requests.
	Total int64 `json:"total"`
	// ByOp counts requests by service and operation, keyed "service op":
	// "blob lease-renew", "blob put-metadata", "queue dequeue", "queue
	// enqueue", "table query", "table batch", ...
	ByOp map[string]int64 `json:"by_op"`
}

// Sub returns the requests made between base (an earlier snapshot of the
// same worker) and r.
func (r RequestCounts) Sub(base RequestCounts) RequestCounts {
	out := RequestCounts{Total: r.Total - base.Total, ByOp: make(map[string]int64, len(r.ByOp))}
	for op, n := range r.ByOp {
		if d := n - base.ByOp[op]; d != 0 {
			out.ByOp[op] = d
		}
	}
	return out
}

func requestCountsOf(c *storage.Counter) RequestCounts {
	_, byOp := c.ByOp()
	out := RequestCounts{ByOp: byOp}
	for _, n := range byOp {
		out.Total += n
	}
	return out
}

package leasecrontype

// Counts are cumulative outcome counts of the deliveries one worker handled
// (or a sum over workers): what queue.Consumer.Stats returns per type, what
// every worker flushes to the Runs table and what `leasecron stats` sums.
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
	// slot, claimed elsewhere, type paused).
	Deferred int64 `json:"deferred"`
	// Abandoned counts deliveries released unfinished at shutdown, or when
	// their concurrency slot was lost while the handler ran.
	Abandoned int64 `json:"abandoned"`
	// Misrouted counts deliveries put back without an attempt because the
	// worker has no handler for their type (a task routed to a queue
	// whose consumers cannot run it).
	Misrouted int64 `json:"misrouted,omitempty"`
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
	c.Misrouted += o.Misrouted
}

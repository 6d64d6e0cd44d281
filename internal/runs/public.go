package runs

import "github.com/leasecron/leasecron/leasecrontype"

// Public returns r as the public leasecrontype.Run (everything but the
// row's ETag).
func (r Run) Public() leasecrontype.Run {
	return leasecrontype.Run{
		ID: r.ID, State: r.State, Type: r.Type, Attempts: r.Attempts, Worker: r.Worker,
		Started: r.Started, Finished: r.Finished, LastError: r.LastError, OutputTail: r.OutputTail,
		Deliveries: r.Deliveries, Duplicates: r.Duplicates, Generation: r.Generation,
		Due: r.Due, ClaimUntil: r.ClaimUntil, SnoozedUntil: r.SnoozedUntil, Updated: r.Updated,
	}
}

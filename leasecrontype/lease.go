package leasecrontype

import "errors"

// Refusals of leases and conditional writes. The storage layer translates
// the Azure error codes into these values (wrapping the SDK's error), and
// every implementation of trafficcop.Lock must report its refusals with
// them, so that callers and the traffic cop can branch with errors.Is
// whatever the storage underneath.
var (
	// ErrLeaseConflict means a lease operation was refused: the lease is
	// held with another ID, or it was lost, or it expired and somebody
	// else took it.
	ErrLeaseConflict = errors.New("lease conflict")

	// ErrPreconditionFailed means a conditional write found the record
	// changed since it was read (an If-Match ETag no longer matches).
	ErrPreconditionFailed = errors.New("precondition failed")

	// ErrServerBusy means the storage service is throttling or failed on
	// its side (503 ServerBusy, 500 OperationTimedOut, other 5xx, 429):
	// nothing was refused, and the same request may succeed a moment
	// later. Callers branch on it to back off instead of giving up.
	ErrServerBusy = errors.New("storage service busy")
)

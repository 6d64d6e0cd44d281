package trafficcop

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; the package wraps
// causes with %w so the storage refusals (leasecrontype.ErrLeaseConflict,
// ErrPreconditionFailed, ErrNotFound) stay visible in the chain too.
var (
	// ErrInvalidOptions is wrapped by every Options / SemaphoreOptions
	// validation error. The message names the field, its value and what is
	// accepted.
	ErrInvalidOptions = errors.New("trafficcop: invalid options")

	// ErrLeaseLost means control ended without the holder choosing to give it
	// up: the service refused a renewal, or no renewal succeeded before the
	// local deadline (last successful renew start + LeaseDuration −
	// SafetyMargin). It is the cancellation cause of a lead context and of a
	// Slot's context in that case.
	ErrLeaseLost = errors.New("trafficcop: lease lost")

	// ErrNotLeader is returned by Cop.Check when the cop does not hold control.
	ErrNotLeader = errors.New("trafficcop: not the leader")

	// ErrStopped is the cancellation cause of a lead context when the cop was
	// stopped (Stop or the context given to Run ended).
	ErrStopped = errors.New("trafficcop: stopped")

	// ErrLeadReturned is the reason given to OnLost when the lead function
	// returned while the cop still held control; the lead function's own
	// error, if any, is wrapped alongside it.
	ErrLeadReturned = errors.New("trafficcop: lead function returned")

	// ErrAlreadyRunning is returned by a second call of Cop.Run. A Cop runs
	// once; build a new one to run again.
	ErrAlreadyRunning = errors.New("trafficcop: Run already called")

	// ErrNoSlot is returned by Semaphore.TryAcquire when every slot is held.
	ErrNoSlot = errors.New("trafficcop: no free slot")

	// ErrSlotReleased is the cancellation cause of a Slot's context after
	// Release.
	ErrSlotReleased = errors.New("trafficcop: slot released")
)

package trafficcop

import (
	"context"
	"time"
)

// Lock is the storage seam under a Cop and a Semaphore: one leasable record
// with metadata, in the manner of client-go's resourcelock.Interface. The
// blob implementation is NewBlobLock; MemoryLock is an in-memory fake driven by
// a leasecrontype.Clock for fast state-machine tests. Other implementations
// (another store with leases) can be written outside this module.
//
// Every method must honour ctx (the cop gives each call its own deadline)
// and report refusals by wrapping these sentinels, so that callers can use
// errors.Is: leasecrontype.ErrLeaseConflict (lease held by another ID,
// lease lost or expired), leasecrontype.ErrPreconditionFailed (ETag
// mismatch), leasecrontype.ErrNotFound (record missing). Any other error
// is treated as transient: the cop retries it.
type Lock interface {
	// Ensure creates the record (and its container) if it is missing,
	// without clobbering one that exists: an "already exists" outcome is
	// success.
	Ensure(ctx context.Context) error
	// Acquire takes the lease with the given ID for duration.
	Acquire(ctx context.Context, leaseID string, duration time.Duration) error
	// Renew extends the lease held with leaseID by its duration.
	Renew(ctx context.Context, leaseID string) error
	// Release gives the lease up so that others can acquire it at once.
	Release(ctx context.Context, leaseID string) error
	// Get reads lease state, metadata and ETag without taking the lease.
	Get(ctx context.Context) (LockState, error)
	// SetMetadata replaces the metadata, only if the lease is held with
	// leaseID and, unless ifMatch is empty, the record's ETag is still
	// ifMatch.
	SetMetadata(ctx context.Context, leaseID, ifMatch string, md map[string]string) error
	// String names the record for logs (e.g. "leasecron/locks/scheduler").
	String() string
}

// LockState is what Lock.Get reports.
type LockState struct {
	// State is the lease state as the service reports it.
	State LeaseState
	// Locked is the lease status: true while a lease is in force (leased
	// or breaking).
	Locked bool
	// Metadata with lower-case keys.
	Metadata map[string]string
	// ETag of the record.
	ETag string
}

// LeaseState is a lease state as reported by the Blob service.
type LeaseState string

// Lease states.
const (
	LeaseAvailable LeaseState = "available"
	LeaseLeased    LeaseState = "leased"
	LeaseExpired   LeaseState = "expired"
	LeaseBreaking  LeaseState = "breaking"
	LeaseBroken    LeaseState = "broken"
)

// Metadata keys of the lease record. The holder writes holder, acquired,
// generation and renewed on acquisition, renewed (the start of its latest
// renewal, by its clock) with every renewal, and released (its generation)
// just before it releases the lease gracefully.
//
// A successor that finds the lease not in force without the released mark
// takes over only once renewed + LeaseDuration has passed: by then the old
// holder's local deadline has passed too, even if the lease vanished early
// (Azurite reports every lease expired after it restarts) while that holder
// still believed it led.
const (
	MetaHolder     = "holder"
	MetaAcquired   = "acquired"
	MetaGeneration = "generation"
	MetaRenewed    = "renewed"
	MetaReleased   = "released"
	// MetaNote carries Options.Note of the holder (rewritten with every
	// renewal) to the cops waiting for the lease (Options.OnNote).
	MetaNote = "note"
	// MetaFleet carries Options.Fleet of the holder the same way
	// (Options.OnFleet).
	MetaFleet = "fleet"
)

// MaxNote is the longest Options.Note kept in the lease metadata; a longer
// one is left out (and logged).
const MaxNote = 2048

// Package trafficcop elects one leader among any number of identical
// instances with an Azure blob lease, and limits per-type concurrency with
// lease slots. It stands on its own: any Go program can embed it as a
// leader elector over a container client it builds with the Azure SDK.
//
// # Building one
//
// The storage seam is a Lock: one leasable record with metadata.
// NewBlobLock puts it on a block blob in a *container.Client (from
// github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container) that the
// caller built with its own credential — a connection string's shared key
// (container.NewClientFromConnectionString), an azidentity credential
// (container.NewClient), or a SAS URL. MemoryLock is an in-memory Lock on a
// leasecrontype.Clock for tests and examples. Then
//
//	lock, err := trafficcop.NewBlobLock(containerClient, "locks/my-job")
//	cop, err := trafficcop.NewCop(lock, trafficcop.Options{})
//	err = cop.Run(ctx, func(ctx context.Context) error { ...; <-ctx.Done(); return nil })
//
// ReadHolder reports who holds a lock without competing for it. Lock
// implementations report refusals by wrapping leasecrontype.ErrLeaseConflict,
// ErrPreconditionFailed and ErrNotFound; this package's own sentinels
// (ErrLeaseLost, ErrNotLeader, ErrStopped, ErrNoSlot, ...) say what the cop
// or a slot did.
//
// # Cop
//
// A Cop competes for the lease on its Lock. The instance that holds the
// lease has control: Cop.Run runs its lead function with a context that is
// cancelled the moment control ends. The holder renews every RenewEvery;
// instances without control try to acquire every PollEvery (jittered), and
// again the moment the holder's lease would run out unless renewed. Each
// acquisition uses a fresh random lease ID, and every lease call has its
// own deadline (CallTimeout) because the SDK's retries could otherwise
// outlast the lease.
//
// Control is believed only until the start of the last successful renewal
// (or of the acquisition) + LeaseDuration − SafetyMargin, measured on the
// local monotonic clock, or until the service refuses a renewal — whichever
// comes first. The start time is taken before the request is sent, so a
// slow or hung call can never extend that belief: the service's lease
// cannot have been extended from before the request left.
//
// On acquisition the holder writes holder, acquired, generation
// (previous + 1) and renewed to the record's metadata, conditional on the
// ETag it read and on its lease ID (see the Meta* constants). The
// generation is a fencing token: it strictly increases from term to term.
// On shutdown the holder marks the lease released and releases it, so
// another instance takes over within one poll interval; after a crash the
// others take over once the lease expires (at most LeaseDuration plus a
// moment).
//
// # Semaphore
//
// A Semaphore is N lease slots for one name (NewSemaphore puts them on the
// blobs {Prefix}/{name}/{i} of a container client; NewSemaphoreWithLocks on
// any Locks); a Slot is held while its lease is renewed in the background
// and frees itself at lease expiry when its holder dies, so counts cannot
// drift.
//
// # What this package does not guarantee
//
//   - It does not fence writes to storage by itself. Between the moment a
//     leader's lease lapses on the service and the moment its own deadline
//     passes there is no overlap only if the assumptions below hold; when
//     they fail, two instances can both believe they lead. Writes that must
//     never come from a stale leader have to be conditional on the
//     generation (leasecron's schedule package does this with a fence row
//     updated in every batch).
//   - It assumes the local clock and the service's clock run at rates that
//     differ by less than SafetyMargin over one LeaseDuration. It does not
//     depend on the clocks agreeing on the time of day.
//   - A process that is paused (GC, VM freeze, SIGSTOP) can keep acting
//     until its local deadline, and code that checked HasControl just before
//     the pause acts after it. Cancellation of the lead context is prompt
//     but not instantaneous; lead must check its context between steps.
//   - A storage service that forgets leases (Azurite after a restart) would
//     let another instance acquire while the old holder still believes it
//     leads. A cop therefore takes a lease that was not released only once
//     the holder's recorded renewal is LeaseDuration old; that protects only
//     if the holder's and the taker's wall clocks agree to within
//     SafetyMargin. A Lock written by something that records no renewals
//     gets no such protection.
//   - Hooks (OnAcquired, OnLost) are delivered in order on their own
//     goroutine: they report changes after the fact and are not a way to
//     stop work in time — use the lead context for that.
package trafficcop

// Package trafficcop elects one leader among any number of identical
// instances with an Azure blob lease, and limits per-type concurrency with
// lease slots.
//
// # Cop
//
// A Cop competes for the lease on one blob (default leasecron/locks/scheduler).
// The instance that holds the lease has control: Cop.Run runs its lead
// function with a context that is cancelled the moment control ends. The
// holder renews every RenewEvery; instances without control try to acquire
// every PollEvery (jittered). Each acquisition uses a fresh random lease ID,
// and every lease call has its own deadline (CallTimeout) because the SDK's
// retries could otherwise outlast the lease.
//
// Control is believed only until the start of the last successful renewal
// (or of the acquisition) + LeaseDuration − SafetyMargin, measured on the
// local monotonic clock, or until the service refuses a renewal — whichever
// comes first. The start time is taken before the request is sent, so a
// slow or hung call can never extend that belief: the service's lease
// cannot have been extended from before the request left.
//
// On acquisition the holder writes holder, acquired and generation
// (previous + 1) to the blob's metadata, conditional on the ETag it read and
// on its lease ID. The generation is a fencing token: it strictly increases
// from term to term. On shutdown the holder releases the lease so another
// instance takes over within one poll interval; after a crash the others
// take over once the lease expires (at most LeaseDuration + PollEvery).
//
// # Semaphore
//
// A Semaphore is N lease slots for one name; a Slot is held while its lease
// is renewed in the background and frees itself at lease expiry when its
// holder dies, so counts cannot drift.
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
//   - A storage service that forgets leases (Azurite after a restart) lets
//     another instance acquire while the old holder still believes it leads,
//     until the old holder's next renewal is refused or its deadline passes.
//   - Hooks (OnAcquired, OnLost) are delivered in order on their own
//     goroutine: they report changes after the fact and are not a way to
//     stop work in time — use the lead context for that.
package trafficcop

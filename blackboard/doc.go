// Package blackboard is leasecron's blackboard: periodic work keyed by name
// (a city, a feed, a report) that any number of identical workers share
// without a leader.
//
// The blackboard is a table with one row per key (PartitionKey "bb", RowKey
// = key). A row holds the key's definition — Interval, Type (the handler
// type, looked up in the same registry as queue handlers) and Payload — and
// its state: Start and Stop of the last run, Running, Worker, ClaimID,
// ClaimedAt, LockedUntil, LastError, LastDuration, RunNow, Runs, Failures.
// [Board] edits definitions and reads the snapshot; [Worker] runs keys.
//
// Both are built over a table service client the caller made with its own
// credential ([NewBoard], [NewWorker] take an *aztables.ServiceClient), or
// over any [Store] ([NewBoardWithStore], [NewWorkerWithStore]); [NewMemoryStore]
// is an in-memory one for tests and examples. A key's Type names a
// leasecrontype.Handler found through Options.Handlers (the worker's
// registry, shared with the queue); the handler gets a leasecrontype.Task
// whose Key is the blackboard key. The calendar sub-package is the
// reference workload.
//
// Every cycle (default one hour, ±10% jitter) a worker lists the board,
// shuffles it so that workers started together spread out, and for each key
// that is due — never run, last Start at least Interval ago, or RunNow set —
// and not running, claims it with a conditional write (If-Match on the ETag
// it read): Start = now, Running = true, Worker = itself, a fresh ClaimID,
// LockedUntil = now + lock TTL. Of two workers that read the same row, only
// one write can succeed, so a key is never claimed twice. A claim whose
// write failed is read back: a row carrying its ClaimID means the write
// landed and only its answer was lost, and the claim is run. While the
// handler runs the worker extends LockedUntil every third of the TTL (a
// heartbeat, counted from the claim, so a claim answered late is extended
// at once), again conditionally; an extension not answered before the
// lock's deadline less a tenth of the TTL is given up there. A claim
// answered after that point is not run at all: it is released with RunNow
// set, so the key runs at the next cycle. When the handler returns, the
// worker records Stop, Running = false, LastError and LastDuration,
// conditional on the ETag of its own last write. A write refused because
// the row changed is re-read: if the row still carries this worker's
// ClaimID (an operator set RunNow or replaced the definition meanwhile) the
// write is redone on the fresh row — unless the row already shows the
// claim ended, which is this write landed with its answer lost; otherwise
// the claim was taken over and the worker leaves the row alone.
//
// A claim whose LockedUntil has passed is abandoned (its worker crashed,
// hung without heartbeating, or lost storage) and is taken over by the next
// worker that walks past it, also by a conditional write, and run at once.
// A worker that cannot extend its claim cancels its handler's context when
// the claim's lock TTL runs out by its own clock, so it does not keep
// running what another worker may by then have taken over.
//
// What it does not guarantee: due times and lock expiry compare one worker's
// clock with times written by another, so clocks must agree to well within
// the lock TTL; a handler that ignores its context's cancellation can still
// overlap with the worker that took its key over; a crash after the handler
// finished but before Stop was recorded makes the key run again once its
// lock expires. Handlers must therefore be idempotent, as for the queue.
// A key starts at most once per Interval; while any worker is alive it
// starts again within about one cycle (plus the time the walk spends on
// other keys) after its Interval has passed.
package blackboard

// Package leasecrontype is leasecron's shared vocabulary: the types and
// errors that more than one public package speaks, gathered in one small
// package without dependencies so that every other package (and a program
// embedding leasecron) can import it without import cycles.
//
//   - The handler contract: Task, Handler, and Output/WithOutput for what a
//     handler prints.
//   - Run records: Run and RunState, what `leasecron status` shows.
//   - Clock and Timer: the time source every service takes, so tests can
//     drive leases, backoff and schedules with a simulated clock.
//   - ErrNotFound: wrapped by every "no such task, run, key, dead letter,
//     blob or table" error of every package, so that one errors.Is test
//     covers them all.
//   - ErrLeaseConflict and ErrPreconditionFailed: the refusals of a lease
//     or a conditional write, which every trafficcop.Lock reports and the
//     storage layer translates Azure's error codes into.
//
// The root package re-exports the names a typical program needs
// (leasecron.Task, leasecron.Handler, leasecron.Run, ...); reach for this
// package when writing code that sits below the root, such as a custom
// queue.Handler or a test clock.
package leasecrontype

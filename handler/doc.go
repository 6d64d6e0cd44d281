// Package handler provides the stock task handlers a worker can be
// configured with: Exec runs a program named in the configuration and feeds
// it the payload on standard input; HTTP sends the payload to a URL.
//
// Both return a leasecrontype.Handler (register it with the worker's
// Handle, or a queue.Consumer's). Their options are validated when the handler
// is built, so a bad configuration is refused at start-up rather than at the
// first task; errors wrap ErrInvalidOptions and name the field and value.
//
// # Security
//
// The program an Exec handler runs and its arguments come from
// configuration only. The payload is data: it is written to the program's
// standard input and never becomes part of a command line, so a payload such
// as "; rm -rf /" reaches the program as those bytes on stdin and nothing
// else. No shell is involved unless the configuration names one.
//
// # Output
//
// Exec keeps only the last ExecOptions.OutputTail bytes of the program's
// combined standard output and error (a ring buffer), so a program that
// prints gigabytes costs a few kilobytes of memory. HTTP keeps the tail of
// the response body the same way. A failed run returns an error carrying
// that tail (*ExecError or *HTTPError, found with errors.As). The tail of
// every run, successful or not, is written to leasecrontype.Output(ctx), so
// the queue consumer stores it in the task's run record; custom handlers
// report output the same way.
//
// # Snooze
//
// A task that is not ready yet ("the input lands in ten minutes") can ask to
// run again later without using an attempt (leasecrontype.Snooze): an Exec
// program exits with ExitSnooze (75) and prints the delay as its last output
// line ("10m", or "600" seconds); an HTTP endpoint answers 503 Service
// Unavailable with a Retry-After header (seconds or an HTTP date). A 503
// without Retry-After, or exit 75 without a readable delay, is a failed
// attempt.
//
// # Idempotency
//
// Delivery is at least once: a task can run twice (after a worker crash, a
// lost lease, or a visibility timeout). Programs and endpoints must be
// idempotent; LEASECRON_TASK_ID / X-Leasecron-Task-Id identify the run and
// are the same on every attempt.
package handler

// Package queue owns the work queue: the message envelope, enqueueing, and
// the consumer pool that dequeues, runs handlers, retries with backoff and
// sets poison messages aside.
//
// # Building one
//
// Over Azure Storage, with clients the caller built with its own
// credential: NewClient (producer, poison queue, depth) and NewConsumer take
// an *azqueue.ServiceClient and the queue names from their options;
// NewAzureQueue wraps one *azqueue.QueueClient as a MessageQueue. Over any
// MessageQueue — AzureQueues, or the in-memory MemoryQueue for tests and
// examples — NewClientWith and NewConsumerWith. Handlers are
// leasecrontype.Handler functions receiving a leasecrontype.Task. What the
// consumer needs from elsewhere is a small interface each, all optional:
// RunRecorder (run records and duplicate suppression), PayloadFetcher
// (large payloads), Limiter (per-type concurrency) and Observer (metrics).
// leasecron's worker wires in its own; a program may bring its own.
//
// # Producing
//
// Client.Enqueue sends an Envelope as JSON with a time-to-live of -1 (a
// fleet that is down for a week keeps its backlog) and an optional initial
// visibility delay (the mover enqueues tasks due within its poll window
// early, hidden until they are due; the service counts the delay in whole
// seconds and it is rounded down, so such a message may appear up to a
// second early — never late). An encoded envelope must fit into one
// message (MaxMessageSize, 64 KiB); larger payloads travel through a blob
// (Envelope.PayloadBlob, the claim check). Queues are created on first use.
//
// # Consuming
//
// A Consumer dequeues up to 32 messages at a time but never more than it has
// free handler slots (ConsumerOptions.Concurrency), runs the leasecrontype.Handler
// registered for each message's type, and deletes the message when the
// handler returns nil. A slot is free again as soon as its handler returns:
// recording the outcome (the run record, then the message's delete or
// rewrite) happens outside it, at most Concurrency at a time, so the round
// trips of the bookkeeping do not keep the next handler waiting; a message
// is still deleted only after its outcome is recorded. An empty queue makes polling back off exponentially,
// with jitter, up to PollMax; the first message snaps it back to PollMin.
//
// On time: a delivered envelope whose Due is still ahead (by at most 2 s
// and half the visibility timeout) is held in its handler slot until Due,
// so a handler never starts early. Consumer.WakeAt lets a producer in the
// same process (the worker's mover) say when a message it enqueued becomes
// visible: the consumer dequeues then, however far its idle polling has
// backed off, and the backoff snaps back to PollMin.
//
// A failed attempt (an error, a panic, a timeout) rewrites the same message
// in place with Attempt+1 and LastError and hides it for
// BackoffBase·2^(attempt−1), capped at BackoffMax and jittered over
// [d/2, d]. Attempts are counted in the envelope, not by the service's
// dequeue count, because deferrals (no limiter slot, claimed elsewhere) and
// shutdown releases also dequeue a message; with a RunRecorder the claim's
// record has the last word (a second message of the run carries its own,
// older count, and takes the record's). After the last attempt the
// message is rewritten to say its attempts are used up, its run is
// recorded dead (and its batch or dependents told), and only then is it
// written to the poison queue as a DeadLetter (with the reason and the
// envelope) and deleted: a worker that dies in between, or run records
// that do not answer, leave the message to set itself aside later
// without running. A message
// that crashes workers before they can record anything is caught by its
// dequeue count: every rewrite stores the count in Envelope.Dequeues, and
// deliveries beyond it count as attempts; past MaxAttempts+CrashMargin the
// message is set aside.
//
// A message whose type has no handler on this worker is put back without
// an attempt, after a wait that grows each time (OutcomeMisrouted), for a
// worker that has one: during a rolling deploy that adds the handler, it
// reaches a worker that has it, and it is never set aside for want of
// one. Messages that are
// not envelopes (not JSON, truncated, missing id or type, unknown version)
// are set aside at once with the reason and deleted; nothing is dropped
// silently and nothing a message contains can crash a worker. Bodies that
// other SDKs base64-encode by default are accepted when they decode to an
// envelope.
//
// While a handler runs, the message's visibility is extended at 2/3 of
// VisibilityTimeout (each extension hands out a new pop receipt), up to
// MaxRunTime, when the handler's context is cancelled and the attempt
// fails. If an extension finds the message gone or its receipt stale, the
// handler's result is still recorded in the run record, but the message is
// not touched again: it reappears and, with run records, is acknowledged as
// a duplicate. A delivery that took two thirds of VisibilityTimeout or
// more to reach its handler (its claim retried, the process stopped) is
// extended before the handler begins, message and claim: when its run's
// claim is no longer its own (leasecrontype.ErrClaimLost: another worker
// received the message again and took the lapsed claim over) or cannot be
// confirmed, the handler does not begin, and the message is put back, or
// left to the worker that received it again.
//
// # Run records and duplicates
//
// With ConsumerOptions.Runs set, every delivery first claims its run with a
// conditional write (see RunRecorder): a run that already succeeded is
// acknowledged without running and counted as a duplicate; a cancelled run
// is acknowledged without running; a run another worker is running under an
// unexpired claim is put back until that claim lapses. If the run records
// do not answer the claim (a fault that passes), the message is put back
// without an attempt and claimed again later: only the claim sees a cancel
// after the move or another worker's claim. A claim that can never be made
// for the message (the store rejects the request, or the id is one the
// records cannot hold) runs the task anyway: at-least-once beats
// exactly-once. An end the run records do not answer through its retries
// leaves the message to reappear (a success runs the task again; a death
// sets the message aside later without running it): acknowledged, the run
// would stay running for good. The claim's extension before the handler of
// a slowed delivery (above) is not bookkeeping either: unanswered, the
// handler does not begin. Every other run-record write is bookkeeping
// whose failure is logged and ignored. Handlers must be idempotent.
//
// Output for the run record: a handler writes to leasecrontype.Output(ctx)
// (the last 4 KiB are kept) and/or returns leasecrontype.WithOutput(err,
// tail).
//
// Claim check: a payload blob is fetched through ConsumerOptions.Payloads
// before the handler runs and deleted after the task succeeds (or is found
// cancelled), except for a recurring series' blob, which its occurrences
// share.
//
// # Paused types
//
// With ConsumerOptions.Pauses set, a delivery whose type is paused is put
// back without running: hidden until the pause ends (PauseHold when it has
// no end), no attempt counted (OutcomePaused). The consumer reads the pause
// state at most once per PauseCheck and only while it receives messages or
// holds paused ones; it remembers the messages it hid and shows them again
// as soon as a check finds their type resumed.
//
// # Traces
//
// Every delivery of an envelope is a span, leasecron.run, in the trace of
// the envelope's TraceParent (a child of it; for an occurrence of a
// recurring series a new trace linked to it), made with
// ConsumerOptions.TracerProvider; the handler's context holds it. A failed
// attempt adds a leasecron.retry span inside it, the last a
// leasecron.dead_letter span. The spans carry leasecron.task.id, .type,
// .attempt and .series, and the run span leasecron.outcome.
//
// # Shutdown
//
// When Run's context ends the consumer stops dequeuing, lets in-flight
// handlers finish within ShutdownGrace, then cancels their contexts. A
// message whose handler did not finish is released (made visible at once,
// no attempt counted), never deleted. Run returns when every handler has
// returned.
//
// # Dead letters
//
// DeadLetters lists, requeues (attempts reset, run back to queued) and
// purges the poison queue. The service's Peek sees at most 32 messages, so
// beyond that the operations walk the queue by dequeuing with a short
// visibility timeout and make untouched records visible again.
package queue

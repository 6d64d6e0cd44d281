// Package schedule owns the ScheduledItems table — the time-ordered list of
// pending tasks — and the Mover that, while its instance holds the traffic
// cop's lease, moves due tasks into the work queue.
//
// # Public surface
//
// Client (New over any Table, NewAzure over an *aztables.ServiceClient)
// adds, gets, cancels, reschedules and lists tasks; Item is a task as
// written and read. Mover (NewMover) moves due rows; it takes the work queue
// as a small Enqueuer (queue.Client implements it), malformed rows go to a
// SetAsider, and its generation comes from the traffic cop's lease term.
// Table is the storage seam both use: NewAzureTable is the Azure
// implementation, MemoryTable the in-memory one for tests and examples.
// PayloadStore holds payloads too large to travel inline (NewPayloadStore
// keeps them in a blob container the caller built). RowKey, ParseRowKey,
// Ticks and ParseRecurrence are the row contract's helpers for programs
// that write rows themselves.
//
// # Row schema (a public contract: any client in any language may insert rows)
//
//	PartitionKey  shard, "00" by default
//	RowKey        {ticks:D19}_{id}: .NET ticks of the due time (100 ns units
//	              since 0001-01-01T00:00:00Z, 19 digits, zero-padded), "_", id
//	Message       the payload (string; may be "")
//	Type          handler type; "default" if absent
//	Recurrence    optional: "@every 10m", a 5-field cron expression, or
//	              @yearly @annually @monthly @weekly @daily @midnight @hourly
//	TZ            optional IANA zone for cron rules (default UTC)
//	Id            optional; the RowKey suffix otherwise
//	Attempts, MaxAttempts  optional integers
//	PayloadBlob   claim-check reference of a payload kept in a blob
//	Indexed       true on rows written by leasecron (they have an index row)
//	Sent, SentUntil  written by the mover: the row's message (a series: its
//	              occurrences up to SentUntil) is already in the queue
//
// Rows sort by due time, so "RowKey lt '{ticks+1:D19}'" selects what is due.
// Two kinds of bookkeeping rows share each partition, with keys that sort
// after every tick so no due query reaches them: the id index rows
// "id~{id}" (property Item = the item's RowKey), which give Get, Cancel and
// Reschedule an O(1) lookup and let Add refuse an id that is already
// scheduled; and the fence row "~fence" (property Generation).
//
// Rows inserted directly have no index row: lookups by id fall back to a
// scan of the item rows (bounded by Options.ScanLimit), and Add does not see
// them when it checks for duplicates.
//
// # Moving
//
// The Mover writes its lease generation into the fence row when it takes
// control (refusing if a newer one is there) and includes a conditional
// update of the fence row (If-Match on the ETag it last saw) in every
// transaction it commits, so a stale leader's transaction fails as a whole.
// The fence row's new ETag is read from each committed transaction's
// response, so a batch costs one request.
//
// A pass is a pipeline: it reads the rows due within the enqueue-early
// window (MoverOptions.Early) page by page in RowKey order; as soon as a
// batch's worth of rows is planned their envelopes are sent (concurrently,
// at most Concurrency at a time), and each batch is committed — in RowKey
// order, one transaction of at most 100 operations after another, each
// carrying the fence — as soon as its envelopes are in the queue, while
// later pages are still being read and sent. Every delete is conditional on
// the ETag read.
//
// Rows due within min(PollEvery, Early) are moved: sent with an initial
// invisibility of the time left and removed. Rows due later in the window
// are sent early and stay in the table, marked as sent (PropSent holds a
// random token their envelopes carry); they are moved, without being sent
// again, once they are that close. Until then a change to them — cancel,
// reschedule, replace, or a delete by another client — changes the row, and
// a worker that checks the message against the row (Client.Current) or
// against the run record the mover confirms before moving the row
// (MoverOptions.Confirm) acknowledges it without running. Without such
// checks (Options.ChangesAfterSend false) the Client refuses those changes
// with ErrAlreadySent.
//
// A recurring row produces every occurrence due within the window, each as
// its own envelope (run id "{series}@{due}") with its own invisibility, at
// most MoverOptions.MaxOccurrences per series and pass; the row moves to
// its first occurrence after the move window in the same transaction that
// removes it, keeping the occurrences already sent beyond it on record
// (PropSentUntil). Occurrences that fell due before the previous pass of
// the term (while nobody moved, or while moving was held back) are skipped:
// an overdue series runs once, not once per missed occurrence, and "@every"
// keeps its phase.
//
// # Guarantees and what is not guaranteed
//
// Every row is enqueued at least once: a row is removed only after its
// envelope was accepted by the queue, and a crash in between enqueues it
// again. A row that changes while it is being moved (cancelled, rescheduled,
// replaced) is not removed by the mover; its old version may still run once.
// Malformed rows are never dropped: they are handed to MoverOptions.SetAside
// with the reason and only then removed. Rows with keys that can never come
// due are found by a periodic sweep, except digit-led keys that sort between
// the current time and year 3170, which wait until then.
//
// The fence makes a stale leader harmless to the table, not to the queue: a
// leader that has lost its lease may still enqueue a duplicate before its
// first transaction fails. Handlers must be idempotent.
package schedule

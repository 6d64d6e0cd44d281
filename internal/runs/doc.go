// Package runs keeps the run records: what happened to each run of a task
// (its visible state, attempts, worker, times, last error and output tail),
// the claim that suppresses duplicate deliveries, the run history listings
// and the fleet's per-minute counters, all in one Azure table (Runs).
//
// docs/run-history.md explains the layout with the numbers behind it; in
// short:
//
// # Rows
//
// A run lives in one of the layout's partitions (Options.Layout: Buckets,
// four, "p0".."p3", unless the shard map records more): the FNV hash of
// its id, or of its series for an occurrence ("{series}@{due}"), so that a
// series' history is one partition. It has up to three rows there:
//
//   - the run row, keyed by the id alone ("r~{id}", or "o~{series}~{inverted
//     due}" for an occurrence): everything, read by Get in one point read;
//   - the time list row "l~{inverted due}~{id}": what a listing shows, in
//     due order, newest first;
//   - for every state but succeeded, the state list row
//     "x~{state}~{inverted due}~{id}" (a running run's key ends with a tag
//     of its worker, an early-sent run confirmed as queued with the token
//     of its message): the listing of that state, newest first.
//
// While the partition count grows (Layout), a process that records a
// run's first record under a smaller count than another may write under
// leaves a pointer row in the id's home under the larger one: the run
// row's key, no state, and the partition of the record (pointTo), so that
// two first records of one run written at once under the two counts meet.
// Lookups follow pointers; listings leave them out.
//
// Every change to a run is one entity-group transaction over its rows
// (same partition), so they never disagree; Verify checks it. A series
// also has a summary row, "s~{series}" in its partition, with the latest
// outcome of its last SummarySlots occurrences (summary.go): each change of
// a numbered occurrence merges its slot in the same transaction, and
// Recent reads it in one point read.
//
// # Writes
//
// The mover records a page of due runs as queued before sending them (one
// transaction per partition and 33 runs) and sets Envelope.Marked on
// those. A worker then claims a marked run by taking its queued row: the
// transaction deletes it, conditionally on it existing, adds the running
// row and merges the claim into the run and time rows — one request, and
// a second claim, a cancel or a finish that got there first makes it fail.
// A retry reads the run row first (its attempt is the record's count,
// which a second message of the run does not know) and writes on its
// ETag; a run without a record is claimed by inserting its rows, which
// fails if a record exists.
// A finish takes the worker's own running row the same way. Anything
// unexpected falls back to reading the run row and writing conditionally
// on its ETag. So the happy path of a task costs the mover's share of a
// batch, one claim and one finish — and claims, extensions and finishes
// submitted while another of their partition is on its way share one
// transaction (group.go), so a busy worker pays less than that.
//
// # Reads
//
// Get is one point read. Query reads each partition once (four requests
// with the default layout) for a page of any size up to 1,000: the time
// rows for all states and for succeeded, a state's own rows otherwise; a
// series reads one partition.
//
// # Retention
//
// Succeeded and cancelled runs are kept Options.Retention (7 days) after
// they finished, failed and dead ones Options.RetentionFailed (30 days).
// Reads hide expired records at once (Get says ErrExpired); Clean deletes
// them without a scan: per partition it reads the expired end of each
// class — state rows of the rare states, time rows due before the cutoff
// for succeeded — and deletes each run's rows in one transaction, 50 runs
// per request, conditionally on the row that proved it expired. A cleaner
// killed midway leaves whole runs only.
//
// # Counters
//
// Each worker writes, per minute in which its counts changed, one row of
// that minute's increments (partition "~m{yyyymmdd}", RowKey
// "{hhmm}~{instance}"); Throughput and SumCounters add them up and Clean
// drops those older than CountersKept (48 hours).
//
// # The previous layout
//
// Tables written before this layout (one row per id in "r0".."rf", counters
// in "~stats") keep working: Get, Claim and Cancel fall back to the old row
// while any exists and convert the run they write; Migrate converts the
// rest.
//
// Run records are bookkeeping: callers log a failed write and carry on.
// The one decision they take part in is the claim, so a Runs-table outage
// holds up tasks that are not yet claimed (the consumer puts their
// messages back until a claim is recorded) and no others.
//
// What this package does not guarantee: a claim is a
// lease on the record until ClaimUntil (extended while the handler runs); a
// worker that stalls past it can still finish after another took the run
// over (its late finish is then not recorded over the new claim), and
// claims compare times written by different workers' clocks. Handlers must
// be idempotent.
package runs

// Package leasecron is the Go API for embedding leasecron, a distributed
// task scheduler that needs nothing but an Azure Storage account (or
// Azurite). A program schedules and inspects tasks with a Client and runs
// them with a Worker; any number of identical workers share one account.
//
// # Worker
//
// NewWorker builds one instance; Handle registers a Handler (a
// func(ctx, Task) error) per task type; Run blocks until its context ends
// and then shuts down gracefully (stop dequeuing, let in-flight tasks
// finish within WorkerOptions.Consumer.ShutdownGrace, release the lease). While it
// runs, a worker
//
//   - competes for the traffic-cop blob lease (package trafficcop) and,
//     while it holds it, moves tasks that have come due from the schedule
//     table into the work queue (package schedule's Mover);
//   - consumes the queue with bounded concurrency, retrying failures with
//     backoff and setting aside what keeps failing (package queue);
//   - walks the blackboard of per-key periodic work (package blackboard);
//   - enforces per-type fleet-wide limits with lease slots
//     (WorkerOptions.Limits);
//   - serves /healthz, /readyz, /metrics and, optionally, the dashboard on
//     WorkerOptions.AdminAddr.
//
// HasControl says whether it leads; Requests counts the storage requests
// it has made (RequestCounts, by operation); MoverStats and ConsumerStats
// expose the lower layers' counters; MetricsHandler serves its Prometheus
// metrics.
//
// # Client
//
// NewClient needs no running worker. Schedule adds a task (an Item: type,
// payload, due time, optional recurrence; ScheduleOptions), ScheduleMany
// many, Cancel, Reschedule and RunNow change it, Get and List read pending
// tasks, and Status reports a task's
// pending row and its Run record (a RunState: scheduled, queued, running,
// succeeded, failed, dead or cancelled). Stats gathers queue depths, the
// due backlog, the leader (Leader) and the fleet's Counters;
// DeadLetters, Blackboard and the blackboard methods, Instances and Limits
// cover the rest of what the command line and the dashboard show. Package
// dashboard serves a Client as a web UI (a worker serves it beside its
// admin endpoints through WorkerOptions.AdminHandler and Worker.Client).
//
// The errors callers branch on, all in errors.go, are ErrNotFound
// (wrapped by every "no such task, run, key or dead letter"),
// ErrInvalidTask (a task refused before anything was written),
// ErrAlreadyScheduled, ErrBatchExists, ErrAlreadyFinished, ErrAlreadySent,
// ErrInvalidRunQuery, ErrNoRunRecords, ErrInvalidOptions, ErrServerBusy
// (storage throttled the request; try again later), ErrDuplicate (a
// unique key is held by another task), ErrShardCountChanged (a unique
// schedule met a shard-count change twice: try again), ErrInvalidProgress (Progress was
// given a percent outside 0–100), ErrDrained (Worker.Run stopped
// because the worker was drained), ErrNotDrainable (Drain found an
// instance that does not look for drain requests) and ErrIncomplete (the
// change was made but a step after it failed: repeat the call); test with
// errors.Is. IsConflict tells the states that forbid a request (sent
// again, it gets the same answer) from failures.
//
// # Options
//
// Every options type of the library follows one idiom: WithDefaults
// returns a copy whose zero fields hold their defaults, and the
// constructor refuses what validation finds wrong with an error wrapping
// its package's ErrInvalidOptions that names the field, the value and what
// is accepted. Zero means the default; a negative value is refused, except
// where a field says it turns something off. WorkerOptions takes the
// settings of the packages it assembles as they are: Lease is
// trafficcop.Timing, Mover schedule.MoverSettings, Consumer
// queue.ConsumerSettings and Blackboard blackboard.Settings.
//
// # Types
//
// Task, Handler, Run and RunState are the names of package leasecrontype,
// leasecron's shared vocabulary (with the handler output helpers Output
// and WithOutput, and the Clock a test can inject through the Options'
// Clock field). Item is package schedule's.
//
// # Guarantees
//
// Delivery is at least once: a task can run more than once (a leader or
// worker crash between two steps), so handlers must be idempotent. With
// run records on (the default), a task whose run already succeeded is not
// run again when a duplicate message arrives, and two workers cannot both
// claim one run. At most one worker moves tasks at a time while leases
// behave as specified; a stale leader's table writes fail whole (a fence
// row). Not guaranteed: exactly-once execution, ordering between tasks due
// at the same moment.
//
// # Lower layers
//
// The packages under the root are public too, for programs that need one
// piece: trafficcop (a blob-lease leader elector and lease-slot
// semaphore any program can embed over its own azblob container client),
// schedule (the schedule table and the mover), queue (the envelope, the
// client and the consumer pool), blackboard (per-key periodic work) and
// blackboard/calendar, handler (exec and http handlers), dashboard (the web
// UI over a Client), and azurite (starting Azurite for tests). The
// repository's examples/ directory holds programs written only against
// this public API; the command (cmd/leasecron) is a module of its own, so
// an embedding program links none of its dependencies (cobra, viper, the
// OpenTelemetry SDK and its exporters).
package leasecron

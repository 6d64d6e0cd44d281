// Package chaos is leasecron's reliability suite: it runs worker processes
// of the built binary against a private Azurite (tools/internal/fleet), schedules
// thousands of tasks whose handler records every execution, injects faults
// (SIGKILL and SIGTERM of leaders and workers, Azurite restarts and crashes,
// network latency, stalls, resets and partitions through
// internal/faultproxy, bad input of many kinds) and checks the guarantees of
// DESIGN.md from recorded evidence:
//
//   - lost: scheduled tasks never executed (must be 0);
//   - duplicates: executions beyond the first (counted and reported);
//   - movers at once: how many instances believed they held control, and
//     so could move, at the same instant (from the terms in the worker
//     logs, see Terms and MaxOverlap);
//   - recovery time after each fault.
//
// This file set holds the evidence parsing, the checks and the report; the
// scenarios are tests. `make chaos` runs the long scenarios (build tag
// chaos), merges their rows into results/chaos.json and regenerates
// docs/RELIABILITY.md from it; short versions of scenarios 1, 2 and 5 run
// in `make test` and write their rows to a temporary file. Every scenario
// also writes its row to the ChaosResults table of its own Azurite.
//
// A scenario that fails keeps its worker logs, records and Azurite data
// (in the system's temporary directory) and logs where; one that passes
// removes them. Environment: CHAOS_KEEP=DIR keeps every scenario's under
// DIR; CHAOS_RESULTS and CHAOS_DOC override the results
// file and the document; CHAOS_CONFIG (a JSON object) is merged over every
// scenario's fleet configuration, for experiments; CHAOS_SHARDS=N runs
// every scenario against a schedule of N shards (workers and the suite's
// client), and "movers at once" then counts the movers of each shard, from
// the shard owners' terms in the logs (ShardTerms); CHAOS_RENDER=1 with
// -run NONE regenerates the document from the results file alone.
package chaos

package config

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/handler"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Renamed maps a key's earlier name to its current one. A file or
// environment that still sets the earlier name keeps working (the current
// name wins when both are set) and Load reports it in
// Config.Deprecated.
var Renamed = map[string]string{
	"aggregator.enabled":  "blackboard.enabled",
	"aggregator.cycle":    "blackboard.cycle",
	"aggregator.lock_ttl": "blackboard.lock_ttl",
}

// Key describes one static configuration key.
type Key struct {
	// Name is the dotted key, e.g. worker.concurrency.
	Name string
	// Default is the value when no source sets the key: a string, an int,
	// a bool or a time.Duration. Defaults that a package applies to a zero
	// option come from that package's constant, so each is declared once.
	Default any
	// Doc says what the key means.
	Doc string
	// Secret keys are redacted wherever the configuration is shown.
	Secret bool
}

// Env is the key's environment variable: LEASECRON_ and the key in upper
// case with '.' as '_' (LEASECRON_WORKER_CONCURRENCY).
func (k Key) Env() string { return envName(k.Name) }

func envName(key string) string {
	return "LEASECRON_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// DefaultString is the default as the configuration would spell it
// ("30s", "8", "true"), or "" when it is empty.
func (k Key) DefaultString() string { return formatValue(k.Default) }

// names are the root package's default resource names.
var names = leasecron.DefaultNames()

// Keys lists every static key with its default and meaning. `leasecron
// config --keys` prints it and the README's configuration table is this
// list (WriteMarkdown; a test compares them).
var Keys = []Key{
	{"storage.connection_string", "", "Storage connection string (AccountName/AccountKey or explicit endpoints). AZURE_STORAGE_CONNECTION_STRING is honoured too.", true},
	{"storage.account", "", "Storage account name, used with Azure AD credentials (managed identity, workload identity, Azure CLI) when no connection string is set.", false},
	{"storage.blob_url", "", "Override of the blob endpoint used with storage.account.", false},
	{"storage.queue_url", "", "Override of the queue endpoint used with storage.account.", false},
	{"storage.table_url", "", "Override of the table endpoint used with storage.account.", false},
	{"names.container", names.Container, "Blob container for the lease blob, slots, payloads and calendars.", false},
	{"names.lease_blob", names.LeaseBlob, "Blob whose lease makes the traffic cop.", false},
	{"names.schedule_table", names.ScheduleTable, "Table of pending tasks.", false},
	{"names.runs_table", names.RunsTable, "Table of run records.", false},
	{"names.blackboard_table", names.BlackboardTable, "Table of blackboard keys.", false},
	{"names.queue", names.Queue, "Work queue.", false},
	{"names.poison_queue", names.PoisonQueue, "Queue for messages set aside (dead letters).", false},
	{"names.queues", 1, "How many work queues messages are spread over: names.queue, then names.queue-1, … (1 to 64; about 2,000 messages/s each on Azure). An idle worker polls one at a time. Every worker and client should agree (workers also drain, within 30 seconds, any {queue}-{n} a client sends to); grow it on the workers first, never shrink it while the extra queues hold messages.", false},
	{"lease.duration", trafficcop.DefaultLeaseDuration, "Lease duration, whole seconds from 15s to 60s.", false},
	{"lease.renew_every", time.Duration(0), "Renew interval; 0 means lease.duration/3. At least 250ms, and at most lease.duration − lease.safety_margin less the time a renewal may take (min(5s, lease.duration/6)): 49s with a 60s lease and the default margin.", false},
	{"lease.poll_every", trafficcop.DefaultPollEvery, "How often an instance without the lease tries to acquire it (jittered).", false},
	{"lease.safety_margin", time.Duration(0), "Control is considered lost at last renew + duration - margin; 0 means max(2s, duration/10). Less than lease.duration, leaving room for a renewal (see lease.renew_every).", false},
	{"mover.poll_every", schedule.DefaultPollEvery, "How often the leader looks for due tasks.", false},
	{"mover.early", time.Duration(0), "Window within which due tasks are enqueued early with a visibility delay, so they start on time even through a leader failover; 0 means lease.duration + lease.poll_every, negative disables.", false},
	{"shards.count", 1, "1: one shard, moved by the traffic cop. Above 1 (up to 256): the schedule is sharded, every live worker moves a share of the shards, and this is the count until a worker writes the shard map; afterwards the map's count rules (`leasecron shards set N`). Every worker and client of a sharded fleet must set it above 1 (see Sharding).", false},
	{"shards.cycle", leasecron.DefaultShardCycle, "With shards.count above 1: how often each worker reads the shard map and the traffic cop looks at which workers are live; a killed worker's shards move within lease.duration plus about two cycles.", false},
	{"mover.concurrency", schedule.DefaultConcurrency, "Concurrent enqueues while moving.", false},
	{"queue.max_depth", 0, "Pause moving while the queue holds this many messages; 0 disables backpressure. The depth is summed over every queue the mover sends to, named queues included: a pool whose queue fills because no worker consumes it (stranded) or it runs slowly holds back the moving of every queue's tasks.", false},
	{"queue.resume_below", 0, "Resume moving below this depth; 0 means queue.max_depth/2.", false},
	{"worker.concurrency", queue.DefaultConcurrency, "Tasks run at once by one worker. A task's slot is free as soon as its handler returns; recording its outcome (up to as many at once) does not hold it.", false},
	{"worker.visibility_timeout", queue.DefaultVisibilityTimeout, "How long a dequeued message stays invisible; extended while its handler runs.", false},
	{"worker.max_run_time", queue.DefaultMaxRunTime, "Longest a handler may run before it is cancelled (a failed attempt); also the timeout of an exec handler without handlers.<type>.timeout.", false},
	{"worker.instance_id", "", "This instance's identity; empty means {hostname}-{pid}-{8 random hex digits}.", false},
	{"worker.shutdown_grace", queue.DefaultShutdownGrace, "On SIGTERM/SIGINT, how long in-flight tasks may finish (1ms to 1h).", false},
	{"worker.poll_min", queue.DefaultPollMin, "Queue polling interval while work is flowing.", false},
	{"worker.poll_max", queue.DefaultPollMax, "Longest queue polling interval when idle (exponential backoff with jitter).", false},
	{"worker.listen_every", queue.DefaultListenEvery, "Longest queue polling interval of the leader's consumer, so that an idle fleet starts a task scheduled for now within a fraction of a second (about 3600/listen_every requests an hour); negative: the leader backs off like the others; otherwise at least 10ms.", false},
	{"worker.counters_every", queue.DefaultCountersEvery, "How often a worker writes its counters (per minute, kept 48 h; `leasecron stats` sums the last 24 h) to the Runs table.", false},
	{"worker.pause_check", queue.DefaultPauseCheck, "How long a worker trusts the pause state (`leasecron pause`) it read; it reads it only while it has work or holds paused tasks.", false},
	{"worker.pause_hold", queue.DefaultPauseHold, "How long a task of a type paused without an end is hidden before it is looked at again (the worker that hid it shows it again as soon as the type is resumed).", false},
	{"worker.progress_every", queue.DefaultProgressEvery, "The shortest time between two writes of a running task's progress: a handler may report as often as it likes; the latest report is written at most this often, and the last one when the attempt ends (see Progress).", false},
	{"worker.drain_check", leasecron.DefaultDrainCheck, "How often a worker looks for a drain request (`leasecron drain`, the fleet page): one blob metadata read each time (360 an hour at 10s). A drained worker stops taking work, finishes what it runs, hands over what it holds and exits 0.", false},
	{"worker.queues", "", "The named queues this worker consumes, each at every priority (a list, or names separated by commas); empty: the default queue and the queues types.<type>.queue gives the types it has handlers for. A task of a type it has no handler for goes back without using an attempt (misrouted).", false},
	{"worker.priority_weights", "", "Empty: strict priorities (a worker never starts a lower level while a higher one it can run waits). Four weights of priorities 1 to 4 (e.g. 8,4,2,1): the level asked first is drawn by weight, so lower levels keep a share.", false},
	{"fairness.lanes", queue.DefaultFairLanes, "How many lanes (queues of their own) the tasks with a fair key (`--fair-key`) of one queue and priority are spread over, by a hash of the key (1 to 64). While several lanes have tasks waiting, workers take from them in turn, so one key's flood delays another key's tasks only by its share; keys that hash to one lane share it.", false},
	{"fairness.weights", "", "Weights of fair keys, KEY=WEIGHT items (a list, or separated by commas): each key listed has a lane of its own, taken from in proportion to its weight against the others' (1 each). At most fairness.lanes-1 keys.", false},
	{"worker.runs", true, "Keep run records (status, duplicate suppression, cancel after move).", false},
	{"worker.lead", true, "Compete for the lease and move due tasks.", false},
	{"worker.consume", true, "Take tasks from the queue.", false},
	{"runs.retention", leasecron.DefaultRunRetention, "How long the record of a succeeded or cancelled run is kept after it finished (7 days). At least `retry.backoff_max` (a worker refuses less: a record cleaned while its task waits for a retry could no longer stop it once cancelled; the leader cleans by its own retention, so with roles split give it the consumers' largest `retry.backoff_max` too), and keep it longer than the longest snooze your handlers ask for, for the same reason; a `--unique-for` window may be no longer than this and `runs.retention_failed`.", false},
	{"runs.retention_failed", leasecron.DefaultRunRetentionFailed, "How long the record of a failed or dead run is kept after its last attempt (30 days). At least `retry.backoff_max` (a worker refuses less: a failed run's record cleaned before its retry would free its unique key and release its `--after` children as if it had been cancelled).", false},
	{"runs.audit_retention", leasecron.DefaultAuditRetention, "How long audit log entries (every dashboard action and every command that changes something) are kept (90 days; at least 24h).", false},
	{"runs.clean_every", leasecron.DefaultRunCleanEvery, "How often the leader removes expired run records and old per-minute counters; 0 disables (then run `leasecron runs clean`).", false},
	{"retry.max_attempts", queue.DefaultMaxAttempts, "Attempts before a task is dead and set aside.", false},
	{"retry.max_snoozes", queue.DefaultMaxSnoozes, "Times one run may snooze (leasecron.Snooze, exec exit 75, http 503 + Retry-After) without using an attempt; each snooze beyond is a failed attempt.", false},
	{"retry.backoff_base", queue.DefaultBackoffBase, "First retry delay; doubles per attempt, with jitter.", false},
	{"retry.backoff_max", queue.DefaultBackoffMax, "Longest retry delay; at least retry.backoff_base.", false},
	{"payload.max_size", schedule.DefaultMaxPayload, "Largest payload in bytes; payloads over 24 KiB travel through a blob.", false},
	{"blackboard.enabled", true, "Walk the blackboard: run its keys as they come due.", false},
	{"blackboard.cycle", blackboard.DefaultCycle, "How often a worker walks the blackboard (jittered).", false},
	{"blackboard.lock_ttl", time.Duration(0), "After how long a claim is abandoned and may be taken over; 0 means the key's interval, else at least 100ms.", false},
	{"admin.addr", "", "Address of /healthz, /readyz and /metrics, HOST:PORT or :PORT (e.g. :8080); empty disables.", false},
	{"admin.pprof", false, "Serve /debug/pprof on the admin address.", false},
	{"admin.dashboard", false, "Also serve the web dashboard on the admin address (under the dashboard.* rules for non-loopback addresses).", false},
	{"admin.api", false, "Also serve the HTTP API for programs (/api/v1, API tokens or api.platform_auth; see docs/api.md) on the admin address.", false},
	{"api.enabled", true, "Serve the HTTP API for programs (/api/v1) beside the dashboard's pages in `leasecron dashboard`; every call needs an API token (`leasecron tokens create`) or the platform's sign-in.", false},
	{"api.platform_auth", false, "Trust Azure Container Apps' (or App Service's) built-in authentication for the API: principals with the app role leasecron.operator, leasecron.scheduler or leasecron.viewer get that role. Only when every request comes through that platform.", false},
	{"api.max_body", api.DefaultMaxBody, "Largest API request body in bytes; a longer one is refused with 413 before it is read whole.", false},
	{"api.max_tasks", api.DefaultMaxTasks, "Most tasks in one API schedule-many request (POST /api/v1/tasks:many).", false},
	{"http.trusted_proxies", "", "Proxies whose X-Forwarded-For is believed for the audit log's `from` of dashboard actions and API calls: IP addresses or CIDR prefixes (a list, or separated by commas). A request whose connection comes from one of them is from the last address the header names that is not itself trusted. Empty: the connection's peer. Listing every address (0.0.0.0/0) would let a client name itself: count the proxies with http.proxy_hops instead.", false},
	{"http.proxy_hops", 0, "How many reverse proxies in front each append to X-Forwarded-For: the audit log's `from` is the entry that many from the header's end (behind Azure Container Apps ingress, which no request gets past otherwise: 1). A request that reaches the listener directly names its own `from` so: where one can, list the proxies in http.trusted_proxies too, and only requests whose connection comes from one of them are counted. 0: not counted.", false},
	{"dashboard.addr", dashboard.DefaultAddr, "Address (HOST:PORT) of `leasecron dashboard`; an address that is not loopback needs dashboard.auth, or dashboard.read_only with dashboard.allow_anonymous.", false},
	{"dashboard.auth", "", "Dashboard credentials of operators (they see and act): basic:USER:PASSWORD or bearer:TOKEN (compared in constant time; a browser sends the token as the basic-auth password).", true},
	{"dashboard.viewer_auth", "", "Dashboard credentials of viewers, in the same forms: they see every page but cannot act (no action buttons; every POST refused).", true},
	{"dashboard.platform_auth", false, "Trust the sign-in of Azure Container Apps' (or App Service's) built-in authentication: its X-MS-CLIENT-PRINCIPAL headers name the user; principals with dashboard.operator_role act, the rest view. Only when every request reaches the dashboard through that platform.", false},
	{"dashboard.base_path", "", "Serve the dashboard under this path prefix (e.g. /leasecron) behind a reverse proxy that forwards the prefix as is; every page, API route and link is under it.", false},
	{"dashboard.operator_role", dashboard.DefaultOperatorRole, "The app role that makes a platform-signed-in principal an operator (with dashboard.platform_auth).", false},
	{"dashboard.read_only", false, "Hide and refuse every dashboard action.", false},
	{"dashboard.allow_anonymous", false, "With dashboard.read_only, allow serving without dashboard.auth on an address that is not loopback.", false},
	{"log.level", "info", "debug, info, warn or error.", false},
	{"log.format", "auto", "auto (JSON unless on a terminal), json or text.", false},
}

// Family describes a family of keys named after task types.
type Family struct {
	// Name is the family's pattern, e.g. limits.<type>.
	Name string
	// Cell is how the README table spells its keys (Markdown).
	Cell string
	// Brief is its one-line summary for `leasecron config --keys`.
	Brief string
	// Doc is its meaning, for the README table.
	Doc string
}

// Families are the keys named after a task type (see schedule.ValidateType
// for the names a type may have).
var Families = []Family{
	{
		Name:  "handlers.<type>.*",
		Cell:  "`handlers.<type>.kind` / `.exec` / `.http` / `.method` / `.headers` / `.timeout`",
		Brief: "kind (exec|http|log|calendar), exec (argv list), http (URL), method, headers, timeout",
		Doc: "How tasks of a type are handled: `exec` (argv list from configuration; payload on stdin), `http` (POST the payload), `log` (log it), `calendar` (merge iCalendar feeds). " +
			"`timeout` is at most worker.max_run_time; without it an exec handler gets worker.max_run_time and an http handler " + formatValue(handler.DefaultHTTPTimeout) + ". " +
			"`exec` goes with kind exec, and `http`, `method` and `headers` (a mapping of names to values, in the file only) with kind http: a field of another kind is refused.",
	},
	{
		Name:  "limits.<type>",
		Cell:  "`limits.<type>` (or `limits.<type>.concurrency`)",
		Brief: "fleet-wide concurrency limit for a task type",
		Doc:   "Fleet-wide number of tasks of this type that may run at once (lease slots).",
	},
	{
		Name:  "limits.<type>.rate",
		Cell:  "`limits.<type>.rate` / `.rate_key`",
		Brief: "fleet-wide starts per time window for a task type (10/1m), optionally per key",
		Doc: "Fleet-wide starts of this type per sliding time window, `COUNT/WINDOW` (`10/1m`, `100/1h`; 1–3000 per 1 s–168 h); a task over its budget waits for it without using an attempt. " +
			"`rate_key`: `unique` (the task's unique key) or `payload.<field>` gives each key its own budget.",
	},
	{
		Name:  "types.<type>.queue",
		Cell:  "`types.<type>.queue` / `.priority`",
		Brief: "the named queue (worker pool) and priority (1 critical … 4 low) of a task type",
		Doc: "Where tasks of this type go when a task names no queue or priority of its own: `queue`, a named queue (1–20 lower-case letters and digits; only workers that consume it take the task), and `priority`, 1 or `critical`, 2 or `high`, 3 or `default`, 4 or `low` (a worker starts a higher level before a lower one). " +
			"Every worker and client should have the same `types`.",
	},
	{
		Name:  "types.<type>.fair_key",
		Cell:  "`types.<type>.fair_key`",
		Brief: "take a task type's fair key from its payload (payload.<field>)",
		Doc: "`payload.<field>`: a task of this type that names no fair key (`--fair-key`) takes the value of this top-level field of its JSON payload (a string, or a number's digits) as its fair key, so programs that write rows or payloads need not set one. " +
			"A task without the field, or whose payload is kept in a blob, has none. Every worker and client should have the same `types`.",
	},
}

// typeFields are the fields of a types.<type> map.
var typeFields = map[string]bool{"queue": true, "priority": true, "fair_key": true}

// limitFields are the fields of a limits.<type> map.
var limitFields = map[string]bool{"concurrency": true, "rate": true, "rate_key": true}

// Dynamic key families: the fields a handler may have and its kinds.
var (
	handlerFields = map[string]bool{"kind": true, "exec": true, "http": true, "method": true, "headers": true, "timeout": true}
	handlerKinds  = map[string]bool{"exec": true, "http": true, "log": true, "calendar": true}
)

// WriteMarkdown writes the configuration table of the README: every key,
// its default and its meaning, then the families.
func WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| key | default | meaning |\n| --- | --- | --- |\n")
	for _, k := range Keys {
		def := k.DefaultString()
		if def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", k.Name, def, k.Doc)
	}
	for _, f := range Families {
		fmt.Fprintf(&b, "| %s | | %s |\n", f.Cell, f.Doc)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteKeys writes every key with its default and meaning, one a line.
func WriteKeys(w io.Writer) error {
	var b strings.Builder
	for _, k := range Keys {
		fmt.Fprintf(&b, "%-28s %-16s %s\n", k.Name, k.DefaultString(), k.Doc)
	}
	for _, f := range Families {
		fmt.Fprintf(&b, "%-28s %-16s %s\n", f.Name, "", f.Brief)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatValue spells a configuration value as a user would write it:
// durations in hours, minutes, seconds or milliseconds, whichever is the
// largest whole unit — except that under two minutes whole seconds are
// kept ("60s", "90s", "2m", "1h").
func formatValue(v any) string {
	d, ok := v.(time.Duration)
	switch {
	case !ok:
		return fmt.Sprint(v)
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0 && d >= 2*time.Minute:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	return d.String()
}

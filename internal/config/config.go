// Package config loads leasecron's configuration from a YAML file, the
// environment and flags (through one viper instance per command tree),
// fills defaults in one place, and reports unknown keys and bad values.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/leasecron/leasecron/internal/storage"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// Config is the effective configuration of a leasecron process.
type Config struct {
	Storage    Storage
	Names      Names
	Lease      Lease
	Mover      Mover
	Queue      Queue
	Worker     Worker
	Runs       Runs
	Retry      Retry
	Payload    Payload
	Aggregator Aggregator
	Admin      Admin
	Dashboard  Dashboard
	Log        Log
	// Handlers maps a task type to how it is handled.
	Handlers map[string]Handler
	// Limits maps a task type to its fleet-wide concurrency limit.
	Limits map[string]int
}

// Storage says how to reach the account.
type Storage struct {
	ConnectionString string
	Account          string
	BlobURL          string
	QueueURL         string
	TableURL         string
}

// Names of every storage resource.
type Names struct {
	Container       string
	LeaseBlob       string
	ScheduleTable   string
	RunsTable       string
	BlackboardTable string
	Queue           string
	PoisonQueue     string
}

// Lease configures the traffic cop.
type Lease struct {
	Duration     time.Duration
	RenewEvery   time.Duration
	PollEvery    time.Duration
	SafetyMargin time.Duration
}

// Mover configures the mover.
type Mover struct {
	PollEvery   time.Duration
	Early       time.Duration
	Concurrency int
}

// Queue configures backpressure.
type Queue struct {
	MaxDepth    int
	ResumeBelow int
}

// Worker configures the consumer pool.
type Worker struct {
	Concurrency       int
	VisibilityTimeout time.Duration
	MaxRunTime        time.Duration
	InstanceID        string
	ShutdownGrace     time.Duration
	PollMin           time.Duration
	PollMax           time.Duration
	CountersEvery     time.Duration
	PauseCheck        time.Duration
	PauseHold         time.Duration
	Runs              bool
	Lead              bool
	Consume           bool
}

// Runs configures run records.
type Runs struct {
	Retention       time.Duration
	RetentionFailed time.Duration
	CleanEvery      time.Duration
}

// Retry configures failed-attempt backoff.
type Retry struct {
	MaxAttempts int
	BackoffBase time.Duration
	BackoffMax  time.Duration
	MaxSnoozes  int
}

// Payload configures payload limits.
type Payload struct {
	MaxSize int
}

// Aggregator configures the blackboard worker.
type Aggregator struct {
	Enabled bool
	Cycle   time.Duration
	LockTTL time.Duration
}

// Admin configures the operations endpoints.
type Admin struct {
	Addr      string
	Pprof     bool
	Dashboard bool
}

// Dashboard configures the web dashboard.
type Dashboard struct {
	Addr           string
	Auth           string
	ReadOnly       bool
	AllowAnonymous bool
}

// Log configures logging.
type Log struct {
	Level  string
	Format string
}

// Handler configures one task type. Exactly one of Exec, HTTP or a
// built-in Kind applies.
type Handler struct {
	// Kind is exec, http, log or calendar; inferred from Exec/HTTP if empty.
	Kind    string
	Exec    []string
	HTTP    string
	Method  string
	Headers map[string]string
	Timeout time.Duration
}

// Key describes one static configuration key.
type Key struct {
	Name    string
	Default any
	Doc     string
	Secret  bool
}

// Keys lists every static key with its default and meaning; the README's
// configuration table is generated from the same list (see `leasecron config --keys`).
var Keys = []Key{
	{"storage.connection_string", "", "Storage connection string (AccountName/AccountKey or explicit endpoints). AZURE_STORAGE_CONNECTION_STRING is honoured too.", true},
	{"storage.account", "", "Storage account name, used with Azure AD credentials (managed identity, workload identity, Azure CLI) when no connection string is set.", false},
	{"storage.blob_url", "", "Override of the blob endpoint used with storage.account.", false},
	{"storage.queue_url", "", "Override of the queue endpoint used with storage.account.", false},
	{"storage.table_url", "", "Override of the table endpoint used with storage.account.", false},
	{"names.container", "leasecron", "Blob container for the lease blob, slots, payloads and calendars.", false},
	{"names.lease_blob", "locks/scheduler", "Blob whose lease makes the traffic cop.", false},
	{"names.schedule_table", "ScheduledItems", "Table of pending tasks.", false},
	{"names.runs_table", "Runs", "Table of run records.", false},
	{"names.blackboard_table", "Blackboard", "Table of aggregator keys.", false},
	{"names.queue", "leasecron-work", "Work queue.", false},
	{"names.poison_queue", "leasecron-work-poison", "Queue for messages set aside (dead letters).", false},
	{"lease.duration", "60s", "Lease duration, 15s to 60s.", false},
	{"lease.renew_every", "0s", "Renew interval; 0 means lease.duration/3.", false},
	{"lease.poll_every", "15s", "How often an instance without the lease tries to acquire it (jittered).", false},
	{"lease.safety_margin", "0s", "Control is considered lost at last renew + duration - margin; 0 means max(2s, duration/10).", false},
	{"mover.poll_every", "5s", "How often the leader looks for due tasks.", false},
	{"mover.early", "0s", "Window within which due tasks are enqueued early with a visibility delay; 0 means mover.poll_every, negative disables.", false},
	{"mover.concurrency", 32, "Concurrent enqueues while moving.", false},
	{"queue.max_depth", 0, "Pause moving while the queue holds this many messages; 0 disables backpressure.", false},
	{"queue.resume_below", 0, "Resume moving below this depth; 0 means queue.max_depth/2.", false},
	{"worker.concurrency", 8, "Tasks run at once by one worker.", false},
	{"worker.visibility_timeout", "60s", "How long a dequeued message stays invisible; extended while its handler runs.", false},
	{"worker.max_run_time", "30m", "Longest a handler may run before it is cancelled (a failed attempt).", false},
	{"worker.instance_id", "", "This instance's identity; empty means host/pid/random.", false},
	{"worker.shutdown_grace", "30s", "On SIGTERM/SIGINT, how long in-flight tasks may finish.", false},
	{"worker.poll_min", "200ms", "Queue polling interval while work is flowing.", false},
	{"worker.poll_max", "30s", "Longest queue polling interval when idle (exponential backoff with jitter).", false},
	{"worker.counters_every", "30s", "How often a worker writes its counters (per minute, kept 48 h; `leasecron stats` sums the last 24 h) to the Runs table.", false},
	{"worker.pause_check", "5s", "How long a worker trusts the pause state (`leasecron pause`) it read; it reads it only while it has work or holds paused tasks.", false},
	{"worker.pause_hold", "10m", "How long a task of a type paused without an end is hidden before it is looked at again (the worker that hid it shows it again as soon as the type is resumed).", false},
	{"worker.runs", true, "Keep run records (status, duplicate suppression, cancel after move).", false},
	{"worker.lead", true, "Compete for the lease and move due tasks.", false},
	{"worker.consume", true, "Take tasks from the queue.", false},
	{"runs.retention", "168h", "How long the record of a succeeded or cancelled run is kept after it finished (7 days).", false},
	{"runs.retention_failed", "720h", "How long the record of a failed or dead run is kept after its last attempt (30 days).", false},
	{"runs.clean_every", "1h", "How often the leader removes expired run records and old per-minute counters; 0 disables (then run `leasecron runs clean`).", false},
	{"retry.max_attempts", 5, "Attempts before a task is dead and set aside.", false},
	{"retry.max_snoozes", 50, "Times one run may snooze (leasecron.Snooze, exec exit 75, http 503 + Retry-After) without using an attempt; each snooze beyond is a failed attempt.", false},
	{"retry.backoff_base", "2s", "First retry delay; doubles per attempt, with jitter.", false},
	{"retry.backoff_max", "10m", "Longest retry delay.", false},
	{"payload.max_size", 1048576, "Largest payload in bytes; payloads over 24 KiB travel through a blob.", false},
	{"aggregator.enabled", true, "Run the blackboard aggregator loop.", false},
	{"aggregator.cycle", "1h", "How often a worker walks the blackboard (jittered).", false},
	{"aggregator.lock_ttl", "0s", "After how long a claim is abandoned and may be taken over; 0 means the key's interval.", false},
	{"admin.addr", "", "Address of /healthz, /readyz and /metrics (e.g. :8080); empty disables.", false},
	{"admin.pprof", false, "Serve /debug/pprof on the admin address.", false},
	{"admin.dashboard", false, "Also serve the web dashboard on the admin address (under the dashboard.* rules for non-loopback addresses).", false},
	{"dashboard.addr", "127.0.0.1:8090", "Address of `leasecron dashboard`; an address that is not loopback needs dashboard.auth, or dashboard.read_only with dashboard.allow_anonymous.", false},
	{"dashboard.auth", "", "Dashboard credentials: basic:USER:PASSWORD or bearer:TOKEN (compared in constant time; a browser sends the token as the basic-auth password).", true},
	{"dashboard.read_only", false, "Hide and refuse every dashboard action.", false},
	{"dashboard.allow_anonymous", false, "With dashboard.read_only, allow serving without dashboard.auth on an address that is not loopback.", false},
	{"log.level", "info", "debug, info, warn or error.", false},
	{"log.format", "auto", "auto (JSON unless on a terminal), json or text.", false},
}

// Dynamic key families.
var (
	handlerFields = map[string]bool{"kind": true, "exec": true, "http": true, "method": true, "headers": true, "timeout": true}
	handlerKinds  = map[string]bool{"exec": true, "http": true, "log": true, "calendar": true}
	typeNameRE    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
)

// ValidTypeName reports whether s can name a task type: 1–63 characters,
// lower-case letters, digits, '-' and '_', starting with a letter.
func ValidTypeName(s string) error {
	if !typeNameRE.MatchString(s) {
		return fmt.Errorf("%w: task type %q: use 1-63 lower-case letters, digits, '-' or '_', starting with a letter", ErrInvalid, s)
	}
	return nil
}

// envAllowed lists LEASECRON_* variables that are not configuration keys.
var envAllowed = map[string]bool{
	"LEASECRON_REQUIRE_AZURITE": true,
	"LEASECRON_AZURITE_BIN":     true,
	"LEASECRON_CONFIG":          true,
	"LEASECRON_BIN":             true,
}

// NewViper returns a viper instance with every default set and the
// environment bound: LEASECRON_ + the key in upper case with '.' as '_'
// (LEASECRON_STORAGE_CONNECTION_STRING), plus LEASECRON_HANDLERS_<TYPE>_<FIELD>
// and LEASECRON_LIMITS_<TYPE>.
func NewViper() *viper.Viper {
	v := viper.New()
	v.SetConfigType("yaml")
	for _, k := range Keys {
		v.SetDefault(k.Name, k.Default)
		_ = v.BindEnv(k.Name, "LEASECRON_"+strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_")))
	}
	_ = v.BindEnv("storage.connection_string", "LEASECRON_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_CONNECTION_STRING")
	return v
}

// Load reads the optional YAML file into v and decodes the effective
// configuration, reporting unknown keys and bad values.
func Load(v *viper.Viper, file string) (Config, error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return Config{}, fmt.Errorf("%w: config file: %w", ErrInvalid, err)
		}
		defer f.Close()
		if err := v.MergeConfig(f); err != nil {
			return Config{}, fmt.Errorf("%w: config file %s: %w", ErrInvalid, filepath.Base(file), err)
		}
	}
	if err := applyDynamicEnv(v, os.Environ()); err != nil {
		return Config{}, err
	}
	var problems []string
	known := map[string]bool{}
	for _, k := range Keys {
		known[k.Name] = true
	}
	for _, k := range v.AllKeys() {
		if known[k] {
			continue
		}
		parts := strings.Split(k, ".")
		switch {
		case parts[0] == "handlers" && len(parts) >= 3 && handlerFields[parts[2]] && (len(parts) == 3 || parts[2] == "headers"):
		case parts[0] == "limits" && len(parts) == 2:
		default:
			problems = append(problems, fmt.Sprintf("unknown key %q", k))
		}
	}
	c := Config{Handlers: map[string]Handler{}, Limits: map[string]int{}}
	d := decoder{v: v}
	c.Storage = Storage{
		ConnectionString: v.GetString("storage.connection_string"),
		Account:          v.GetString("storage.account"),
		BlobURL:          d.url("storage.blob_url"),
		QueueURL:         d.url("storage.queue_url"),
		TableURL:         d.url("storage.table_url"),
	}
	c.Names = Names{
		Container:       d.name("names.container", storage.ValidateContainerName),
		LeaseBlob:       d.str("names.lease_blob"),
		ScheduleTable:   d.name("names.schedule_table", storage.ValidateTableName),
		RunsTable:       d.name("names.runs_table", storage.ValidateTableName),
		BlackboardTable: d.name("names.blackboard_table", storage.ValidateTableName),
		Queue:           d.name("names.queue", storage.ValidateQueueName),
		PoisonQueue:     d.name("names.poison_queue", storage.ValidateQueueName),
	}
	if c.Names.LeaseBlob == "" {
		d.bad("names.lease_blob", "", "a blob name")
	}
	c.Lease = Lease{
		Duration:     d.dur("lease.duration", 15*time.Second, 60*time.Second),
		RenewEvery:   d.dur("lease.renew_every", 0, time.Minute),
		PollEvery:    d.dur("lease.poll_every", 100*time.Millisecond, time.Hour),
		SafetyMargin: d.dur("lease.safety_margin", 0, time.Minute),
	}
	c.Mover = Mover{
		PollEvery:   d.dur("mover.poll_every", 100*time.Millisecond, time.Hour),
		Early:       d.dur("mover.early", -time.Hour, time.Hour),
		Concurrency: d.int("mover.concurrency", 1, 1024),
	}
	c.Queue = Queue{MaxDepth: d.int("queue.max_depth", 0, 1<<30), ResumeBelow: d.int("queue.resume_below", 0, 1<<30)}
	if c.Queue.ResumeBelow == 0 {
		c.Queue.ResumeBelow = c.Queue.MaxDepth / 2
	}
	if c.Queue.MaxDepth > 0 && c.Queue.ResumeBelow >= c.Queue.MaxDepth {
		d.bad("queue.resume_below", strconv.Itoa(c.Queue.ResumeBelow), fmt.Sprintf("less than queue.max_depth (%d)", c.Queue.MaxDepth))
	}
	c.Worker = Worker{
		Concurrency:       d.int("worker.concurrency", 1, 1024),
		VisibilityTimeout: d.dur("worker.visibility_timeout", time.Second, 7*24*time.Hour),
		MaxRunTime:        d.dur("worker.max_run_time", time.Second, 7*24*time.Hour),
		InstanceID:        d.str("worker.instance_id"),
		ShutdownGrace:     d.dur("worker.shutdown_grace", 0, time.Hour),
		PollMin:           d.dur("worker.poll_min", 10*time.Millisecond, time.Hour),
		PollMax:           d.dur("worker.poll_max", 10*time.Millisecond, time.Hour),
		CountersEvery:     d.dur("worker.counters_every", time.Second, 24*time.Hour),
		PauseCheck:        d.dur("worker.pause_check", 100*time.Millisecond, time.Hour),
		PauseHold:         d.dur("worker.pause_hold", time.Second, 7*24*time.Hour),
		Runs:              d.bool("worker.runs"),
		Lead:              d.bool("worker.lead"),
		Consume:           d.bool("worker.consume"),
	}
	if c.Worker.PollMax < c.Worker.PollMin {
		d.bad("worker.poll_max", c.Worker.PollMax.String(), "at least worker.poll_min ("+c.Worker.PollMin.String()+")")
	}
	if c.Worker.InstanceID != "" {
		if err := storage.ValidateKeyPart("worker.instance_id", c.Worker.InstanceID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	c.Runs = Runs{
		Retention:       d.dur("runs.retention", time.Minute, 100*365*24*time.Hour),
		RetentionFailed: d.dur("runs.retention_failed", time.Minute, 100*365*24*time.Hour),
		CleanEvery:      d.dur("runs.clean_every", 0, 7*24*time.Hour),
	}
	if c.Runs.CleanEvery > 0 && c.Runs.CleanEvery < time.Minute {
		d.bad("runs.clean_every", c.Runs.CleanEvery.String(), "0 (off) or at least 1m")
	}
	c.Retry = Retry{
		MaxAttempts: d.int("retry.max_attempts", 1, 1000),
		MaxSnoozes:  d.int("retry.max_snoozes", 1, 100000),
		BackoffBase: d.dur("retry.backoff_base", time.Millisecond, 24*time.Hour),
		BackoffMax:  d.dur("retry.backoff_max", time.Millisecond, 7*24*time.Hour),
	}
	c.Payload = Payload{MaxSize: d.int("payload.max_size", 1, 64<<20)}
	c.Aggregator = Aggregator{
		Enabled: d.bool("aggregator.enabled"),
		Cycle:   d.dur("aggregator.cycle", 100*time.Millisecond, 7*24*time.Hour),
		LockTTL: d.dur("aggregator.lock_ttl", 0, 7*24*time.Hour),
	}
	c.Admin = Admin{Addr: d.str("admin.addr"), Pprof: d.bool("admin.pprof"), Dashboard: d.bool("admin.dashboard")}
	c.Dashboard = Dashboard{Addr: d.str("dashboard.addr"), Auth: d.str("dashboard.auth"), ReadOnly: d.bool("dashboard.read_only"), AllowAnonymous: d.bool("dashboard.allow_anonymous")}
	if c.Admin.Dashboard && c.Admin.Addr == "" {
		d.bad("admin.dashboard", "true", "false unless admin.addr is set (the dashboard is served on it)")
	}
	c.Log = Log{Level: d.oneOf("log.level", "debug", "info", "warn", "error"), Format: d.oneOf("log.format", "auto", "json", "text")}

	for typ, raw := range v.GetStringMap("handlers") {
		if err := ValidTypeName(typ); err != nil {
			problems = append(problems, fmt.Sprintf("handlers.%s: %v", typ, err))
			continue
		}
		c.Handlers[typ] = d.handler(typ, raw)
	}
	for typ := range v.GetStringMap("limits") {
		if err := ValidTypeName(typ); err != nil {
			problems = append(problems, fmt.Sprintf("limits.%s: %v", typ, err))
			continue
		}
		c.Limits[typ] = d.int("limits."+typ, 1, 10000)
	}
	problems = append(problems, d.problems...)
	if len(problems) > 0 {
		sort.Strings(problems)
		return c, fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(problems, "\n  "))
	}
	return c, nil
}

// applyDynamicEnv maps LEASECRON_HANDLERS_<TYPE>_<FIELD> and
// LEASECRON_LIMITS_<TYPE> into v and reports LEASECRON_* variables that name
// no key.
func applyDynamicEnv(v *viper.Viper, env []string) error {
	static := map[string]bool{}
	for _, k := range Keys {
		static["LEASECRON_"+strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))] = true
	}
	var problems []string
	overlay := map[string]any{}
	handlers := map[string]any{}
	limits := map[string]any{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LEASECRON_") || static[name] || envAllowed[name] {
			continue
		}
		rest := strings.ToLower(strings.TrimPrefix(name, "LEASECRON_"))
		switch {
		case strings.HasPrefix(rest, "handlers_"):
			body := strings.TrimPrefix(rest, "handlers_")
			i := strings.LastIndex(body, "_")
			if i <= 0 || !handlerFields[body[i+1:]] {
				problems = append(problems, fmt.Sprintf("environment %s: want LEASECRON_HANDLERS_<TYPE>_<KIND|EXEC|HTTP|METHOD|TIMEOUT>", name))
				continue
			}
			typ, field := body[:i], body[i+1:]
			h, _ := handlers[typ].(map[string]any)
			if h == nil {
				h = map[string]any{}
				handlers[typ] = h
			}
			if field == "exec" {
				h[field] = strings.Fields(val)
			} else {
				h[field] = val
			}
		case strings.HasPrefix(rest, "limits_"):
			limits[strings.TrimPrefix(rest, "limits_")] = val
		default:
			problems = append(problems, fmt.Sprintf("environment %s names no configuration key (see `leasecron config --keys`)", name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(problems, "\n  "))
	}
	if len(handlers) > 0 {
		overlay["handlers"] = handlers
	}
	if len(limits) > 0 {
		overlay["limits"] = limits
	}
	if len(overlay) > 0 {
		// Merged into the config layer so file and environment combine.
		return v.MergeConfigMap(overlay)
	}
	return nil
}

type decoder struct {
	v        *viper.Viper
	problems []string
}

func (d *decoder) bad(key, val, want string) {
	d.problems = append(d.problems, fmt.Sprintf("%s = %q: want %s", key, val, want))
}

func (d *decoder) str(key string) string { return strings.TrimSpace(d.v.GetString(key)) }

func (d *decoder) name(key string, check func(string) error) string {
	s := d.str(key)
	if err := check(s); err != nil {
		d.problems = append(d.problems, fmt.Sprintf("%s: %v", key, err))
	}
	return s
}

func (d *decoder) url(key string) string {
	s := d.str(key)
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		d.bad(key, s, "an http(s) URL")
	}
	return s
}

func (d *decoder) dur(key string, lo, hi time.Duration) time.Duration {
	raw := d.v.Get(key)
	var (
		t   time.Duration
		err error
	)
	switch x := raw.(type) {
	case time.Duration:
		t = x
	case string:
		t, err = time.ParseDuration(strings.TrimSpace(x))
	case int, int64, float64:
		err = errors.New("needs a unit")
	default:
		err = fmt.Errorf("unexpected %T", raw)
	}
	if err != nil {
		d.bad(key, fmt.Sprint(raw), "a duration such as 30s, 5m or 1h")
		return 0
	}
	if t < lo || t > hi {
		d.bad(key, t.String(), fmt.Sprintf("a duration from %s to %s", lo, hi))
	}
	return t
}

func (d *decoder) int(key string, lo, hi int) int {
	raw := d.v.Get(key)
	var n int
	switch x := raw.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case float64:
		if x != float64(int(x)) {
			d.bad(key, fmt.Sprint(raw), "a whole number")
			return 0
		}
		n = int(x)
	case string:
		var err error
		if n, err = strconv.Atoi(strings.TrimSpace(x)); err != nil {
			d.bad(key, x, "a whole number")
			return 0
		}
	default:
		d.bad(key, fmt.Sprint(raw), "a whole number")
		return 0
	}
	if n < lo || n > hi {
		d.bad(key, strconv.Itoa(n), fmt.Sprintf("a number from %d to %d", lo, hi))
	}
	return n
}

func (d *decoder) bool(key string) bool {
	raw := d.v.Get(key)
	switch x := raw.(type) {
	case bool:
		return x
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			d.bad(key, x, "true or false")
		}
		return b
	}
	d.bad(key, fmt.Sprint(raw), "true or false")
	return false
}

func (d *decoder) oneOf(key string, allowed ...string) string {
	s := strings.ToLower(d.str(key))
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	d.bad(key, s, "one of "+strings.Join(allowed, ", "))
	return allowed[0]
}

func (d *decoder) handler(typ string, raw any) Handler {
	prefix := "handlers." + typ + "."
	h := Handler{Kind: strings.ToLower(d.str(prefix + "kind")), HTTP: d.str(prefix + "http"), Method: strings.ToUpper(d.str(prefix + "method"))}
	h.Exec = d.v.GetStringSlice(prefix + "exec")
	if len(h.Exec) == 1 && strings.ContainsAny(h.Exec[0], " \t") {
		// A single string is split on white space; use a YAML list for
		// arguments that contain spaces.
		h.Exec = strings.Fields(h.Exec[0])
	}
	h.Headers = d.v.GetStringMapString(prefix + "headers")
	if d.v.IsSet(prefix + "timeout") {
		h.Timeout = d.dur(prefix+"timeout", time.Millisecond, 7*24*time.Hour)
	}
	if h.Kind == "" {
		switch {
		case len(h.Exec) > 0 && h.HTTP != "":
			d.bad(prefix+"exec", strings.Join(h.Exec, " "), "either exec or http for one type, not both")
		case len(h.Exec) > 0:
			h.Kind = "exec"
		case h.HTTP != "":
			h.Kind = "http"
		default:
			d.bad(prefix+"kind", "", "exec (with handlers."+typ+".exec), http (with handlers."+typ+".http), log or calendar")
			return h
		}
	}
	if !handlerKinds[h.Kind] {
		d.bad(prefix+"kind", h.Kind, "exec, http, log or calendar")
	}
	switch h.Kind {
	case "exec":
		if len(h.Exec) == 0 {
			d.bad(prefix+"exec", "", "the command to run, as a list: [\"/usr/local/bin/report\", \"--daily\"]")
		}
	case "http":
		u, err := url.Parse(h.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.bad(prefix+"http", h.HTTP, "an http(s) URL")
		}
	}
	_ = raw
	return h
}

// StorageConfig converts the storage section for internal/storage.
func (c Config) StorageConfig() storage.Config {
	return storage.Config{
		ConnectionString: c.Storage.ConnectionString,
		Account:          c.Storage.Account,
		BlobURL:          c.Storage.BlobURL,
		QueueURL:         c.Storage.QueueURL,
		TableURL:         c.Storage.TableURL,
	}
}

// Redacted returns the effective configuration as a nested map for
// display, with secrets redacted.
func Redacted(v *viper.Viper) map[string]any {
	out := map[string]any{}
	secret := map[string]bool{}
	for _, k := range Keys {
		secret[k.Name] = k.Secret
	}
	for _, k := range v.AllKeys() {
		val := v.Get(k)
		if s, ok := val.(string); ok {
			if secret[k] && s != "" {
				val = storage.Redact(s)
				if val == s {
					val = "REDACTED"
				}
			}
		}
		m := out
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = val
	}
	return out
}

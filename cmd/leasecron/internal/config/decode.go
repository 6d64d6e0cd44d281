package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/internal/clientip"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/tasktype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/trafficcop"
)

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
	var problems, deprecated []string
	known := map[string]bool{}
	for _, k := range Keys {
		known[k.Name] = true
	}
	for old, cur := range Renamed {
		known[old] = true
		if !v.IsSet(old) {
			continue
		}
		deprecated = append(deprecated, fmt.Sprintf("%s (or %s) is now %s (%s); the old name still works", old, envName(old), cur, envName(cur)))
		if !v.InConfig(cur) && os.Getenv(envName(cur)) == "" {
			v.Set(cur, v.Get(old))
		}
	}
	sort.Strings(deprecated)
	for _, k := range v.AllKeys() {
		if known[k] {
			continue
		}
		parts := strings.Split(k, ".")
		switch {
		case parts[0] == "handlers" && len(parts) >= 3 && handlerFields[parts[2]] && (len(parts) == 3 || parts[2] == "headers"):
		case parts[0] == "limits" && (len(parts) == 2 || len(parts) == 3 && limitFields[parts[2]]):
		case parts[0] == "types" && len(parts) == 3 && typeFields[parts[2]]:
		default:
			problems = append(problems, fmt.Sprintf("unknown key %q", k))
		}
	}
	c := Config{Handlers: map[string]Handler{}, Limits: map[string]int{}, Rates: map[string]leasecron.RateLimit{},
		Routing: leasecron.Routing{Types: map[string]leasecron.Route{}}, Deprecated: deprecated}
	d := decoder{v: v}
	c.Storage = leasecron.Storage{
		ConnectionString: v.GetString("storage.connection_string"),
		Account:          v.GetString("storage.account"),
		BlobURL:          d.url("storage.blob_url"),
		QueueURL:         d.url("storage.queue_url"),
		TableURL:         d.url("storage.table_url"),
	}
	c.Names = leasecron.Names{
		Container:       d.name("names.container", storage.ValidateContainerName),
		LeaseBlob:       d.str("names.lease_blob"),
		ScheduleTable:   d.name("names.schedule_table", storage.ValidateTableName),
		RunsTable:       d.name("names.runs_table", storage.ValidateTableName),
		BlackboardTable: d.name("names.blackboard_table", storage.ValidateTableName),
		Queue:           d.name("names.queue", storage.ValidateQueueName),
		PoisonQueue:     d.name("names.poison_queue", storage.ValidateQueueName),
		Shards:          d.int("shards.count", 1, leasecron.MaxShards),
		Queues:          d.int("names.queues", 1, queue.MaxQueues),
	}
	c.Shards = Shards{Cycle: d.dur("shards.cycle", 50*time.Millisecond, time.Minute)}
	if c.Names.LeaseBlob == "" {
		d.bad("names.lease_blob", "", "a blob name")
	}
	c.Lease = Lease{
		Duration:     d.dur("lease.duration", 15*time.Second, 60*time.Second),
		RenewEvery:   d.dur("lease.renew_every", 0, time.Minute),
		PollEvery:    d.dur("lease.poll_every", 100*time.Millisecond, time.Hour),
		SafetyMargin: d.dur("lease.safety_margin", 0, time.Minute),
	}
	d.leaseTiming(c.Lease)
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
		ShutdownGrace:     d.dur("worker.shutdown_grace", time.Millisecond, time.Hour),
		PollMin:           d.dur("worker.poll_min", 10*time.Millisecond, time.Hour),
		PollMax:           d.dur("worker.poll_max", 10*time.Millisecond, time.Hour),
		ListenEvery:       d.dur("worker.listen_every", -24*time.Hour, time.Hour),
		CountersEvery:     d.dur("worker.counters_every", time.Second, 24*time.Hour),
		PauseCheck:        d.dur("worker.pause_check", 100*time.Millisecond, time.Hour),
		PauseHold:         d.dur("worker.pause_hold", time.Second, 7*24*time.Hour),
		ProgressEvery:     d.dur("worker.progress_every", 100*time.Millisecond, time.Hour),
		DrainCheck:        d.dur("worker.drain_check", 100*time.Millisecond, 10*time.Minute),
		Queues:            d.queues("worker.queues"),
		PriorityWeights:   d.weights("worker.priority_weights"),
		Runs:              d.bool("worker.runs"),
		Lead:              d.bool("worker.lead"),
		Consume:           d.bool("worker.consume"),
	}
	if l := c.Worker.ListenEvery; l >= 0 && l < 10*time.Millisecond && !d.reported("worker.listen_every") {
		// 0 would be the library's default (200ms), not "always".
		d.bad("worker.listen_every", d.text("worker.listen_every"), "at least 10ms, or negative to never listen")
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
		AuditRetention:  d.dur("runs.audit_retention", 24*time.Hour, 100*365*24*time.Hour),
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
	if r := c.Retry; r.BackoffMax < r.BackoffBase && !d.reported("retry.backoff_base") && !d.reported("retry.backoff_max") {
		// (Either key may be the one set: the message says both ways out.)
		d.bad("retry.backoff_max", d.text("retry.backoff_max"), "at least retry.backoff_base ("+formatValue(r.BackoffBase)+"): raise retry.backoff_max or lower retry.backoff_base")
	}
	c.Payload = Payload{MaxSize: d.int("payload.max_size", 1, 64<<20)}
	c.Blackboard = Blackboard{
		Enabled: d.bool("blackboard.enabled"),
		Cycle:   d.dur("blackboard.cycle", 100*time.Millisecond, 7*24*time.Hour),
		LockTTL: d.dur("blackboard.lock_ttl", 0, 7*24*time.Hour),
	}
	if t := c.Blackboard.LockTTL; t > 0 && t < blackboard.MinLockTTL {
		d.bad("blackboard.lock_ttl", d.text("blackboard.lock_ttl"), "0 (each key's interval) or at least "+formatValue(blackboard.MinLockTTL))
	}
	c.Admin = Admin{Addr: d.addr("admin.addr", true), Pprof: d.bool("admin.pprof"), Dashboard: d.bool("admin.dashboard"), API: d.bool("admin.api")}
	c.API = API{Enabled: d.bool("api.enabled"), PlatformAuth: d.bool("api.platform_auth"),
		MaxBody: d.int("api.max_body", 1<<10, 256<<20), MaxTasks: d.int("api.max_tasks", 1, 100000)}
	c.HTTP = HTTP{TrustedProxies: d.prefixes("http.trusted_proxies"), ProxyHops: d.int("http.proxy_hops", 0, 10)}
	c.Dashboard = Dashboard{Addr: d.addr("dashboard.addr", false), Auth: d.str("dashboard.auth"), ViewerAuth: d.str("dashboard.viewer_auth"),
		PlatformAuth: d.bool("dashboard.platform_auth"), OperatorRole: d.str("dashboard.operator_role"),
		BasePath: d.name("dashboard.base_path", dashboard.ValidateBasePath),
		ReadOnly: d.bool("dashboard.read_only"), AllowAnonymous: d.bool("dashboard.allow_anonymous")}
	if c.Admin.Dashboard && c.Admin.Addr == "" {
		d.bad("admin.dashboard", "true", "false unless admin.addr is set (the dashboard is served on it)")
	}
	if c.Admin.API && c.Admin.Addr == "" {
		d.bad("admin.api", "true", "false unless admin.addr is set (the API is served on it)")
	}
	c.Log = Log{Level: d.oneOf("log.level", "debug", "info", "warn", "error"), Format: d.oneOf("log.format", "auto", "json", "text")}

	for typ := range v.GetStringMap("handlers") {
		if err := tasktype.Validate(typ); err != nil {
			problems = append(problems, fmt.Sprintf("handlers.%s: %v", typ, err))
			continue
		}
		c.Handlers[typ] = d.handler(typ, c.Worker.MaxRunTime)
	}
	for typ := range v.GetStringMap("limits") {
		if err := tasktype.Validate(typ); err != nil {
			problems = append(problems, fmt.Sprintf("limits.%s: %v", typ, err))
			continue
		}
		key := "limits." + typ
		if _, nested := v.Get(key).(map[string]any); !nested {
			c.Limits[typ] = d.int(key, 1, 10000)
			continue
		}
		if v.IsSet(key + ".concurrency") {
			c.Limits[typ] = d.int(key+".concurrency", 1, 10000)
		}
		if raw := d.str(key + ".rate"); raw != "" {
			r, err := leasecron.ParseRateLimit(raw)
			if err != nil {
				d.bad(key+".rate", raw, "COUNT/WINDOW with a count of 1 to 3000 and a window of 1s to 168h (e.g. 10/1m, 100/1h)")
				continue
			}
			r.Key = d.str(key + ".rate_key")
			if r.Key != "" && r.Key != "unique" && (!strings.HasPrefix(r.Key, "payload.") || r.Key == "payload.") {
				d.bad(key+".rate_key", r.Key, `"unique" (the task's unique key) or "payload.<field>" (a top-level field of its JSON payload)`)
				continue
			}
			c.Rates[typ] = r
		} else if d.str(key+".rate_key") != "" {
			d.bad(key+".rate_key", d.str(key+".rate_key"), "set together with "+key+".rate")
		}
	}
	for typ := range v.GetStringMap("types") {
		if err := tasktype.Validate(typ); err != nil {
			problems = append(problems, fmt.Sprintf("types.%s: %v", typ, err))
			continue
		}
		key := "types." + typ
		r := leasecron.Route{Queue: d.str(key + ".queue")}
		if err := queue.ValidateRouteQueue(r.Queue); err != nil {
			d.bad(key+".queue", r.Queue, "1 to 20 lower-case letters and digits, starting with a letter (not p1…p9 or poison)")
		}
		if raw := d.str(key + ".priority"); raw != "" {
			p, err := queue.ParsePriority(raw)
			if err != nil {
				d.bad(key+".priority", raw, "1 (critical), 2 (high), 3 (default) or 4 (low)")
			}
			r.Priority = p
		}
		c.Routing.Types[typ] = r
		if fk := d.str(key + ".fair_key"); fk != "" {
			if f, ok := strings.CutPrefix(fk, "payload."); !ok || f == "" {
				d.bad(key+".fair_key", fk, "payload.<field>, a top-level field of the task's JSON payload")
			} else {
				if c.Routing.FairKeys == nil {
					c.Routing.FairKeys = map[string]string{}
				}
				c.Routing.FairKeys[typ] = fk
			}
		}
	}
	c.Routing.FairLanes = d.int("fairness.lanes", 1, queue.MaxFairLanes)
	c.Routing.FairWeights = d.fairWeights("fairness.weights", c.Routing.FairLanes)
	problems = append(problems, d.problems...)
	if len(problems) > 0 {
		sort.Strings(problems)
		return c, fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(problems, "\n  "))
	}
	return c, nil
}

type decoder struct {
	v        *viper.Viper
	problems []string
}

func (d *decoder) bad(key, val, want string) {
	d.problems = append(d.problems, fmt.Sprintf("%s = %q: want %s", key, val, want))
}

// text is the value of key as it was given ("1m", not "1m0s"), for a
// refusal that checks it against another key.
func (d *decoder) text(key string) string {
	if t, ok := d.v.Get(key).(time.Duration); ok {
		return formatValue(t) // a default
	}
	return strings.TrimSpace(fmt.Sprint(d.v.Get(key)))
}

// reported tells whether key has a problem already (so a check of keys
// together does not add a second one for a value that did not parse).
func (d *decoder) reported(key string) bool {
	for _, p := range d.problems {
		if strings.HasPrefix(p, key+" = ") || strings.HasPrefix(p, key+": ") {
			return true
		}
	}
	return false
}

// addr reads a listen address: HOST:PORT or :PORT with a port number
// (empty, when allowed, disables what listens on it).
func (d *decoder) addr(key string, emptyOK bool) string {
	s := d.str(key)
	if s == "" && emptyOK {
		return ""
	}
	_, port, err := net.SplitHostPort(s)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		want := "HOST:PORT or :PORT with a port number from 0 to 65535 (e.g. 127.0.0.1:8090, :8080)"
		if emptyOK {
			want += ", or empty to disable"
		}
		d.bad(key, s, want)
	}
	return s
}

// leaseTiming checks the lease keys together, as the traffic cop checks
// its timing (trafficcop.LeaseTiming's invariants, with its defaults for
// the keys left 0), and names the key to change: a worker would refuse
// them at start in terms of its Go options, blaming a renewal interval
// nobody set for a safety margin too large.
func (d *decoder) leaseTiming(l Lease) {
	if l.Duration < trafficcop.MinLeaseDuration || l.Duration > trafficcop.MaxLeaseDuration {
		return // reported already
	}
	if l.Duration%time.Second != 0 {
		d.bad("lease.duration", d.text("lease.duration"), "whole seconds from 15s to 60s (the lease lengths the Blob service grants)")
		return
	}
	if d.reported("lease.renew_every") || d.reported("lease.safety_margin") {
		return
	}
	t := trafficcop.LeaseTiming{LeaseDuration: l.Duration, RenewEvery: l.RenewEvery, SafetyMargin: l.SafetyMargin}.WithDefaults()
	trusted := t.LeaseDuration - t.SafetyMargin
	switch {
	case t.SafetyMargin >= t.LeaseDuration:
		d.bad("lease.safety_margin", d.text("lease.safety_margin"), "less than lease.duration ("+formatValue(l.Duration)+"), or 0 for max(2s, lease.duration/10)")
	case t.RetryEvery > t.RenewEvery:
		// A failed renewal is retried every RenewEvery/10, at least
		// trafficcop.MinRetryEvery.
		d.bad("lease.renew_every", d.text("lease.renew_every"), "at least "+formatValue(trafficcop.MinRetryEvery)+", or 0 for lease.duration/3")
	case t.RenewEvery+t.CallTimeout > trusted && l.RenewEvery != 0 && trusted-t.CallTimeout >= trafficcop.MinRetryEvery:
		d.bad("lease.renew_every", d.text("lease.renew_every"), fmt.Sprintf("at most %s (lease.duration %s, less lease.safety_margin %s, less the %s a renewal may take), or 0 for lease.duration/3",
			formatValue(trusted-t.CallTimeout), formatValue(t.LeaseDuration), formatValue(t.SafetyMargin), formatValue(t.CallTimeout)))
	case t.RenewEvery+t.CallTimeout > trusted:
		// (Also when lease.renew_every was set but no renewal interval
		// would leave room: the margin is what to change.)
		d.bad("lease.safety_margin", d.text("lease.safety_margin"), fmt.Sprintf("at most %s, so that a renewal every %s (lease.renew_every) and the %s it may take fit in lease.duration (%s); or 0 for max(2s, lease.duration/10)",
			formatValue(max(0, t.LeaseDuration-t.RenewEvery-t.CallTimeout)), formatValue(t.RenewEvery), formatValue(t.CallTimeout), formatValue(t.LeaseDuration)))
	}
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

// list reads a key given as a YAML list or as one string of items
// separated by commas or spaces (an environment variable).
func (d *decoder) list(key string) []string {
	var items []string
	switch x := d.v.Get(key).(type) {
	case nil:
	case []any:
		for _, e := range x {
			items = append(items, strings.TrimSpace(fmt.Sprint(e)))
		}
	case []string:
		items = x
	default:
		items = strings.FieldsFunc(fmt.Sprint(x), func(r rune) bool { return r == ',' || r == ' ' })
	}
	out := items[:0:0]
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// prefixes reads a list of IP addresses and CIDR prefixes.
func (d *decoder) prefixes(key string) []netip.Prefix {
	var out []netip.Prefix
	for _, e := range d.list(key) {
		p, err := clientip.Parse([]string{e})
		if err != nil {
			d.bad(key, e, "IP addresses or CIDR prefixes (such as 10.0.0.0/8 or 2001:db8::/32), in a list or separated by commas")
			continue
		}
		out = append(out, p...)
	}
	return out
}

// queues reads a list of named queues.
func (d *decoder) queues(key string) []string {
	qs := d.list(key)
	for _, q := range qs {
		if err := queue.ValidateRouteQueue(q); err != nil {
			d.bad(key, q, "named queues of 1 to 20 lower-case letters and digits, starting with a letter (default: the default queue)")
		}
	}
	return qs
}

// fairWeights reads KEY=WEIGHT items: at most lanes-1 keys (each has a
// lane of its own), weights 1 to 1000.
func (d *decoder) fairWeights(key string, lanes int) map[string]int {
	items := d.list(key)
	if len(items) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, it := range items {
		k, w, ok := strings.Cut(it, "=")
		n, err := strconv.Atoi(strings.TrimSpace(w))
		k = strings.TrimSpace(k)
		if !ok || err != nil || n < 1 || n > 1000 || k == "" || queue.ValidateFairKey(k) != nil {
			d.bad(key, it, "KEY=WEIGHT items (a fair key and a weight of 1 to 1000), e.g. tenant-7=3")
			continue
		}
		out[k] = n
	}
	if len(out) > lanes-1 {
		d.bad(key, strings.Join(items, ","), fmt.Sprintf("at most fairness.lanes-1 = %d keys (each has a lane of its own)", lanes-1))
	}
	return out
}

// weights reads the four priority weights, or none.
func (d *decoder) weights(key string) []int {
	raw := d.list(key)
	if len(raw) == 0 {
		return nil
	}
	want := "four whole numbers from 1 to 1000, the weights of priorities 1 to 4 (e.g. 8,4,2,1), or empty for strict priorities"
	if len(raw) != queue.Levels {
		d.bad(key, strings.Join(raw, ","), want)
		return nil
	}
	out := make([]int, len(raw))
	for i, s := range raw {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			d.bad(key, strings.Join(raw, ","), want)
			return nil
		}
		out[i] = n
	}
	return out
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

// handler decodes handlers.<typ>. Its timeout may not exceed maxRun
// (worker.max_run_time, which cancels any handler anyway); an exec handler
// without one gets maxRun, so a long job is not cut short by a default
// of its own.
func (d *decoder) handler(typ string, maxRun time.Duration) Handler {
	prefix := "handlers." + typ + "."
	h := Handler{Kind: strings.ToLower(d.str(prefix + "kind")), HTTP: d.str(prefix + "http"), Method: strings.ToUpper(d.str(prefix + "method"))}
	h.Exec = d.v.GetStringSlice(prefix + "exec")
	if len(h.Exec) == 1 && strings.ContainsAny(h.Exec[0], " \t") {
		// A single string is split on white space; use a YAML list for
		// arguments that contain spaces.
		h.Exec = strings.Fields(h.Exec[0])
	}
	if raw := d.v.Get(prefix + "headers"); raw != nil {
		if _, ok := raw.(map[string]any); !ok {
			// Not echoed: header values are secrets.
			d.problems = append(d.problems, fmt.Sprintf("%sheaders: want a mapping of header names to values (Authorization: Bearer …), got a %T", prefix, raw))
		}
	}
	h.Headers = d.v.GetStringMapString(prefix + "headers")
	if d.v.IsSet(prefix + "timeout") {
		h.Timeout = d.dur(prefix+"timeout", time.Millisecond, 7*24*time.Hour)
		if maxRun > 0 && h.Timeout > maxRun {
			d.bad(prefix+"timeout", formatValue(h.Timeout), fmt.Sprintf("at most worker.max_run_time (%s), which cancels every handler; raise both for longer jobs", formatValue(maxRun)))
		}
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
	// A field of another kind would be ignored without a word.
	if h.Kind != "exec" && len(h.Exec) > 0 {
		d.bad(prefix+"exec", strings.Join(h.Exec, " "), "no exec with kind "+h.Kind+" (exec is the command of kind exec)")
	}
	if h.Kind != "http" {
		if h.HTTP != "" {
			d.bad(prefix+"http", h.HTTP, "no http with kind "+h.Kind+" (http is the URL of kind http)")
		}
		if h.Method != "" {
			d.bad(prefix+"method", h.Method, "no method with kind "+h.Kind+" (method goes with kind http)")
		}
		if len(h.Headers) > 0 {
			d.problems = append(d.problems, fmt.Sprintf("%sheaders: want none with kind %s (headers go with kind http)", prefix, h.Kind))
		}
	}
	switch h.Kind {
	case "exec":
		if len(h.Exec) == 0 {
			d.bad(prefix+"exec", "", "the command to run, as a list: [\"/usr/local/bin/report\", \"--daily\"]")
		}
		if h.Timeout == 0 {
			h.Timeout = maxRun
		}
	case "http":
		u, err := url.Parse(h.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.bad(prefix+"http", h.HTTP, "an http(s) URL")
		}
		if h.Method != "" && strings.IndexFunc(h.Method, notTokenChar) >= 0 {
			d.bad(prefix+"method", h.Method, "an HTTP method such as POST, PUT or PATCH (default POST)")
		}
	}
	return h
}

// notTokenChar reports a rune that may not appear in an HTTP method (an
// RFC 9110 token).
func notTokenChar(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// CheckWorker reports what only a worker refuses: with run records on,
// runs.retention and runs.retention_failed shorter than retry.backoff_max
// (leasecron.NewWorker refuses the same, in terms of its options). Other
// commands do not use retry.* and take such a configuration.
func (c Config) CheckWorker() error {
	if !c.Worker.Runs {
		return nil
	}
	var problems []string
	for _, r := range []struct {
		key string
		d   time.Duration
	}{{"runs.retention", c.Runs.Retention}, {"runs.retention_failed", c.Runs.RetentionFailed}} {
		if r.d < c.Retry.BackoffMax {
			problems = append(problems, fmt.Sprintf("%s = %q: want at least retry.backoff_max (%s), or lower retry.backoff_max: a run record cleaned while its task waits for a retry no longer stops a cancelled task, holds its unique key or keeps its --after children waiting",
				r.key, formatValue(r.d), formatValue(c.Retry.BackoffMax)))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(problems, "\n  "))
	}
	return nil
}

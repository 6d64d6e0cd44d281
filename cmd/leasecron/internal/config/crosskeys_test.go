package config

import (
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/trafficcop"
)

// Values that Load took and a worker then refused at start in terms of
// its Go options (RenewEvery, ConsumerSettings.BackoffMax, Options.Addr,
// HTTPOptions.Method) — or took and ignored without a word (a
// shutdown_grace of 0 meant 30s, headers given as a string, an exec
// command beside kind log) — are refused by Load, naming the key and the
// value as given.
func TestValuesAWorkerRefusesAreRefusedByKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		want string
	}{
		{"renew_every too long", "", map[string]string{"LEASECRON_LEASE_RENEW_EVERY": "59s"}, `lease.renew_every = "59s": want at most 49s`},
		{"renew_every too short", "", map[string]string{"LEASECRON_LEASE_RENEW_EVERY": "100ms"}, `lease.renew_every = "100ms": want at least 250ms`},
		{"safety_margin past the lease", "", map[string]string{"LEASECRON_LEASE_SAFETY_MARGIN": "60s"}, `lease.safety_margin = "60s": want less than lease.duration (60s)`},
		// It was RenewEvery, which nobody set, that the worker blamed.
		{"safety_margin leaves no room", "", map[string]string{"LEASECRON_LEASE_SAFETY_MARGIN": "50s"}, `lease.safety_margin = "50s": want at most 35s`},
		{"lease in fractions", "lease:\n  duration: 15.5s\n", nil, `lease.duration = "15.5s": want whole seconds`},
		// Both lease keys set, and no renewal interval would leave room: the
		// margin is what to change, not an interval "at most -1s".
		{"renew_every set, margin leaves no room", "", map[string]string{"LEASECRON_LEASE_RENEW_EVERY": "20s", "LEASECRON_LEASE_SAFETY_MARGIN": "56s"}, `lease.safety_margin = "56s": want at most 35s`},
		// Only the base set: the message says both ways out.
		{"base over the default max", "", map[string]string{"LEASECRON_RETRY_BACKOFF_BASE": "20m"}, `raise retry.backoff_max or lower retry.backoff_base`},
		{"backoff_max under base", "", map[string]string{"LEASECRON_RETRY_BACKOFF_BASE": "1h", "LEASECRON_RETRY_BACKOFF_MAX": "1m"}, `retry.backoff_max = "1m": want at least retry.backoff_base (1h)`},
		{"shutdown_grace 0", "worker:\n  shutdown_grace: 0s\n", nil, `worker.shutdown_grace = "0s": want a duration from 1ms`},
		{"listen_every 0", "worker:\n  listen_every: 0s\n", nil, `worker.listen_every = "0s": want at least 10ms, or negative`},
		{"lock_ttl under the minimum", "blackboard:\n  lock_ttl: 50ms\n", nil, `blackboard.lock_ttl = "50ms": want 0 (each key's interval) or at least 100ms`},
		{"admin.addr without port", "admin:\n  addr: nonsense\n", nil, `admin.addr = "nonsense": want HOST:PORT`},
		{"admin.addr port out of range", "", map[string]string{"LEASECRON_ADMIN_ADDR": ":99999"}, `admin.addr = ":99999"`},
		{"dashboard.addr without port", "", map[string]string{"LEASECRON_DASHBOARD_ADDR": "localhost"}, `dashboard.addr = "localhost": want HOST:PORT`},
		{"method not a token", "handlers:\n  hook:\n    http: https://example.invalid/\n    method: PO ST\n", nil, `handlers.hook.method = "PO ST": want an HTTP method`},
		{"exec beside kind log", "handlers:\n  hello:\n    kind: log\n    exec: [/bin/true]\n", nil, `handlers.hello.exec = "/bin/true": want no exec with kind log`},
		{"method beside kind exec", "handlers:\n  job:\n    exec: [/bin/true]\n    method: PUT\n", nil, `handlers.job.method = "PUT": want no method with kind exec`},
		{"headers as a string", "handlers:\n  hook:\n    http: https://example.invalid/\n    headers: \"Authorization: s3cr3t\"\n", nil, `handlers.hook.headers: want a mapping of header names to values`},
		{"headers from the environment", "", map[string]string{"LEASECRON_HANDLERS_HOOK_HTTP": "https://example.invalid/", "LEASECRON_HANDLERS_HOOK_HEADERS": "Authorization: s3cr3t"}, `LEASECRON_HANDLERS_HOOK_HEADERS: handler headers are a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v; want an error naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("Load echoed a header value: %v", err)
			}
		})
	}
	// The forms that are right still load.
	if _, err := load(t, "admin:\n  addr: \":8080\"\nhandlers:\n  hook:\n    http: https://example.invalid/\n    method: put\n    headers:\n      Authorization: x\n", nil); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
}

// Load's lease checks are the traffic cop's: every combination it takes,
// a worker starts with, and every one it refuses, the cop refuses too.
func TestLeaseKeysAgreeWithTheTrafficCop(t *testing.T) {
	durs := []time.Duration{15 * time.Second, 30 * time.Second, 60 * time.Second}
	renews := []time.Duration{0, 200 * time.Millisecond, 250 * time.Millisecond, 5 * time.Second, 10 * time.Second, 20 * time.Second, 49 * time.Second, 50 * time.Second}
	margins := []time.Duration{0, time.Second, 2 * time.Second, 10 * time.Second, 14 * time.Second, 15 * time.Second, 35 * time.Second, 36 * time.Second, time.Minute}
	for _, d := range durs {
		for _, r := range renews {
			for _, m := range margins {
				_, err := load(t, "", map[string]string{"LEASECRON_LEASE_DURATION": d.String(), "LEASECRON_LEASE_RENEW_EVERY": r.String(), "LEASECRON_LEASE_SAFETY_MARGIN": m.String()})
				_, copErr := trafficcop.NewCop(trafficcop.NewMemoryLock("lease", nil), trafficcop.Options{Timing: trafficcop.Timing{
					LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: d, RenewEvery: r, SafetyMargin: m}}})
				if (err == nil) != (copErr == nil) {
					t.Errorf("duration %v renew_every %v safety_margin %v: Load %v; the traffic cop %v", d, r, m, err, copErr)
				}
			}
		}
	}
}

// Types' fair keys can come from the environment, as every other types
// field: LEASECRON_TYPES_<TYPE>_FAIR_KEY was split at its last '_' and
// refused as an unknown field "key".
func TestTypesFairKeyFromTheEnvironment(t *testing.T) {
	c, err := load(t, "", map[string]string{"LEASECRON_TYPES_MY_MAIL_FAIR_KEY": "payload.tenant", "LEASECRON_TYPES_MY_MAIL_QUEUE": "mail"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Routing.FairKeys["my_mail"] != "payload.tenant" || c.Routing.Types["my_mail"].Queue != "mail" {
		t.Fatalf("routing %+v", c.Routing)
	}
	if _, err := load(t, "", map[string]string{"LEASECRON_TYPES_MAIL_WEIGHT": "3"}); err == nil || !strings.Contains(err.Error(), "<QUEUE|PRIORITY|FAIR_KEY>") {
		t.Fatalf("unknown types field: %v", err)
	}
}

// A worker's run records must outlive its longest retry delay; the check
// names the keys. Other commands take such a configuration.
func TestCheckWorkerNamesRetentionAndBackoff(t *testing.T) {
	c, err := load(t, "runs:\n  retention_failed: 5m\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckWorker(); err == nil || !strings.Contains(err.Error(), `runs.retention_failed = "5m": want at least retry.backoff_max (10m)`) {
		t.Fatalf("CheckWorker: %v", err)
	}
	c.Worker.Runs = false
	if err := c.CheckWorker(); err != nil {
		t.Fatalf("without run records: %v", err)
	}
}

package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

func load(t *testing.T, yaml string, env map[string]string) (Config, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	file := ""
	if yaml != "" {
		file = writeFile(t, yaml)
	}
	return Load(NewViper(), file)
}

func writeFile(t *testing.T, yaml string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestDefaults(t *testing.T) {
	c, err := load(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lease.Duration != 60*time.Second || c.Lease.PollEvery != 15*time.Second {
		t.Errorf("lease defaults: %+v", c.Lease)
	}
	if c.Mover.Early != 0 {
		t.Errorf("mover.early default should be 0 (= lease.duration + lease.poll_every), got %v", c.Mover.Early)
	}
	if c.Names.Queue != "leasecron-work" || c.Names.ScheduleTable != "ScheduledItems" {
		t.Errorf("names: %+v", c.Names)
	}
	if c.Retry.MaxAttempts != 5 || !c.Worker.Runs || c.Worker.Concurrency != 8 {
		t.Errorf("worker/retry: %+v %+v", c.Worker, c.Retry)
	}
}

func TestFileEnvAndHandlers(t *testing.T) {
	c, err := load(t, `
storage:
  connection_string: "UseDevelopmentStorage=true"
lease:
  duration: 15s
handlers:
  report:
    exec: ["/bin/sh", "-c", "cat"]
    timeout: 10s
  hook:
    http: https://example.invalid/hook
    headers:
      Authorization: Bearer x
limits:
  report: 3
`, map[string]string{
		"LEASECRON_WORKER_CONCURRENCY": "4",
		"LEASECRON_HANDLERS_ECHO_EXEC": "/bin/cat -",
		"LEASECRON_LIMITS_HOOK":        "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker.Concurrency != 4 || c.Lease.Duration != 15*time.Second {
		t.Errorf("env/file values: %+v %+v", c.Worker, c.Lease)
	}
	if h := c.Handlers["report"]; h.Kind != "exec" || len(h.Exec) != 3 || h.Timeout != 10*time.Second {
		t.Errorf("report handler: %+v", h)
	}
	if h := c.Handlers["hook"]; h.Kind != "http" || h.Headers["authorization"] != "Bearer x" {
		t.Errorf("hook handler: %+v", h)
	}
	if h := c.Handlers["echo"]; h.Kind != "exec" || strings.Join(h.Exec, " ") != "/bin/cat -" {
		t.Errorf("echo handler from env: %+v", h)
	}
	if c.Limits["report"] != 3 || c.Limits["hook"] != 2 {
		t.Errorf("limits: %v", c.Limits)
	}
}

// http.trusted_proxies reaches the API's and the dashboard's options, from
// a file's list or an environment variable's commas.
func TestTrustedProxies(t *testing.T) {
	for _, src := range []struct {
		yaml string
		env  map[string]string
	}{
		{"http:\n  trusted_proxies: [10.0.0.0/8, \"fd00::1\"]\n", nil},
		{"", map[string]string{"LEASECRON_HTTP_TRUSTED_PROXIES": "10.0.0.0/8, fd00::1", "LEASECRON_HTTP_PROXY_HOPS": "1"}},
	} {
		c, err := load(t, src.yaml+"  proxy_hops: 1\n", src.env)
		if src.yaml == "" {
			c, err = load(t, "", src.env)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(c.HTTP.TrustedProxies); got != "[10.0.0.0/8 fd00::1/128]" || c.HTTP.ProxyHops != 1 {
			t.Errorf("trusted proxies = %s, hops %d", got, c.HTTP.ProxyHops)
		}
	}
}

func TestAzureConnectionStringEnv(t *testing.T) {
	c, err := load(t, "", map[string]string{"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.ConnectionString != "UseDevelopmentStorage=true" {
		t.Fatalf("got %q", c.Storage.ConnectionString)
	}
}

func TestBadInputIsReportedByName(t *testing.T) {
	cases := []struct {
		name, yaml string
		env        map[string]string
		want       []string
	}{
		{"unknown key", "lease:\n  durration: 20s\n", nil, []string{`unknown key "lease.durration"`}},
		{"lease too short", "lease:\n  duration: 5s\n", nil, []string{"lease.duration", "15s to 1m0s"}},
		{"not a duration", "worker:\n  visibility_timeout: soon\n", nil, []string{"worker.visibility_timeout", `"soon"`, "a duration"}},
		{"not a number", "worker:\n  concurrency: many\n", nil, []string{"worker.concurrency", "whole number"}},
		{"bad queue name", "names:\n  queue: Bad_Queue\n", nil, []string{"names.queue", "Bad_Queue"}},
		{"bad table name", "names:\n  runs_table: 1runs\n", nil, []string{"names.runs_table", "1runs"}},
		{"handler without command", "handlers:\n  x:\n    timeout: 1s\n", nil, []string{"handlers.x.kind"}},
		{"handler bad kind", "handlers:\n  x:\n    kind: shell\n", nil, []string{"handlers.x.kind", "shell"}},
		{"handler bad url", "handlers:\n  x:\n    http: ftp://h/\n", nil, []string{"handlers.x.http", "ftp://h/"}},
		{"bad type name", "handlers:\n  Bad/Type:\n    kind: log\n", nil, []string{"bad/type", "lower-case"}},
		{"unknown env", "", map[string]string{"LEASECRON_WORKR_CONCURRENCY": "3"}, []string{"LEASECRON_WORKR_CONCURRENCY"}},
		{"bad env value", "", map[string]string{"LEASECRON_RETRY_MAX_ATTEMPTS": "0"}, []string{"retry.max_attempts", "1 to 1000"}},
		{"bad log level", "log:\n  level: loud\n", nil, []string{"log.level", "loud"}},
		{"bad yaml", "lease: [\n", nil, []string{"config file"}},
		{"resume above max", "queue:\n  max_depth: 10\n  resume_below: 20\n", nil, []string{"queue.resume_below"}},
		{"too many proxy hops", "http:\n  proxy_hops: 11\n", nil, []string{"http.proxy_hops", "0 to 10"}},
		{"bad trusted proxy", "http:\n  trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]\n", nil, []string{"http.trusted_proxies", `"10.0.0.0/33"`, "CIDR prefixes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml, tc.env)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestRedactedHidesSecrets(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "AccountName=a;AccountKey=c2VjcmV0;BlobEndpoint=http://x/a")
	v := NewViper()
	if _, err := Load(v, ""); err != nil {
		t.Fatal(err)
	}
	m := Redacted(v)
	cs := m["storage"].(map[string]any)["connection_string"].(string)
	if strings.Contains(cs, "c2VjcmV0") || !strings.Contains(cs, "REDACTED") {
		t.Fatalf("not redacted: %q", cs)
	}
}

// Keys set by an earlier name keep working, the current name wins when
// both are set, and Load says which were used.
func TestRenamedKeys(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		c, err := load(t, "aggregator:\n  cycle: 2s\n  enabled: false\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Blackboard.Cycle != 2*time.Second || c.Blackboard.Enabled {
			t.Errorf("blackboard from aggregator.*: %+v", c.Blackboard)
		}
		if len(c.Deprecated) != 2 || !strings.Contains(c.Deprecated[0], "is now blackboard.") {
			t.Errorf("deprecated: %q", c.Deprecated)
		}
	})
	t.Run("env", func(t *testing.T) {
		c, err := load(t, "", map[string]string{"LEASECRON_AGGREGATOR_LOCK_TTL": "3m"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Blackboard.LockTTL != 3*time.Minute || len(c.Deprecated) != 1 {
			t.Errorf("lock ttl %v, deprecated %q", c.Blackboard.LockTTL, c.Deprecated)
		}
	})
	t.Run("the current name wins", func(t *testing.T) {
		c, err := load(t, "aggregator:\n  cycle: 2s\nblackboard:\n  cycle: 5s\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Blackboard.Cycle != 5*time.Second {
			t.Errorf("cycle %v, want 5s", c.Blackboard.Cycle)
		}
	})
	t.Run("a bad value names the key it came from", func(t *testing.T) {
		_, err := load(t, "aggregator:\n  cycle: soon\n", nil)
		if err == nil || !strings.Contains(err.Error(), "blackboard.cycle") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRateLimits(t *testing.T) {
	c, err := load(t, `
limits:
  mail: 2
  sms:
    concurrency: 3
    rate: 10/1m
  invoice:
    rate: 100/1h
    rate_key: payload.customer
`, map[string]string{
		"LEASECRON_LIMITS_PUSH_RATE":     "5/10s",
		"LEASECRON_LIMITS_PUSH_RATE_KEY": "unique",
		"LEASECRON_LIMITS_HOOK":          "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits["mail"] != 2 || c.Limits["sms"] != 3 || c.Limits["hook"] != 4 || len(c.Limits) != 3 {
		t.Errorf("limits: %v", c.Limits)
	}
	want := map[string]leasecron.RateLimit{
		"sms":     {Count: 10, Per: time.Minute},
		"invoice": {Count: 100, Per: time.Hour, Key: "payload.customer"},
		"push":    {Count: 5, Per: 10 * time.Second, Key: "unique"},
	}
	if len(c.Rates) != len(want) {
		t.Fatalf("rates: %v", c.Rates)
	}
	for typ, r := range want {
		if c.Rates[typ] != r {
			t.Errorf("rates[%s] = %+v, want %+v", typ, c.Rates[typ], r)
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"limits:\n  mail:\n    rate: 10/0s\n", `limits.mail.rate = "10/0s"`},
		{"limits:\n  mail:\n    rate: 10/-1m\n", `"10/-1m"`},
		{"limits:\n  mail:\n    rate: often\n", `"often": want COUNT/WINDOW`},
		{"limits:\n  mail:\n    rate: 0/1m\n", `"0/1m"`},
		{"limits:\n  mail:\n    rate: 10/1m\n    rate_key: customer\n", `limits.mail.rate_key = "customer"`},
		{"limits:\n  mail:\n    rate_key: unique\n", "set together with limits.mail.rate"},
		{"limits:\n  mail:\n    burst: 3\n", `unknown key "limits.mail.burst"`},
		{"limits:\n  mail:\n    concurrency: 0\n", "limits.mail.concurrency"},
	} {
		t.Run(bad.want, func(t *testing.T) {
			_, err := load(t, bad.yaml, nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("%q: %v; want an error naming %s", bad.yaml, err, bad.want)
			}
		})
	}
}

// types.<type>.queue, .priority and .fair_key, fairness.lanes and
// .weights, worker.queues and .priority_weights become the worker's
// routing; a bad value is refused by name.
func TestRouting(t *testing.T) {
	c, err := load(t, `
types:
  render:
    queue: gpu
    priority: high
  bill:
    priority: 4
    fair_key: payload.customer
fairness:
  lanes: 16
  weights: [gold=3]
worker:
  queues: [gpu, default]
  priority_weights: 8,4,2,1
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Routing.Types["render"]; r.Queue != "gpu" || r.Priority != 2 {
		t.Errorf("types.render = %+v, want queue gpu, priority 2", r)
	}
	if r := c.Routing.Types["bill"]; r.Queue != "" || r.Priority != 4 {
		t.Errorf("types.bill = %+v, want priority 4", r)
	}
	if len(c.Routing.FairKeys) != 1 || c.Routing.FairKeys["bill"] != "payload.customer" {
		t.Errorf("fair keys = %v, want bill: payload.customer", c.Routing.FairKeys)
	}
	if c.Routing.FairLanes != 16 || c.Routing.FairWeights["gold"] != 3 || len(c.Routing.FairWeights) != 1 {
		t.Errorf("fairness = %d lanes, weights %v; want 16, gold=3", c.Routing.FairLanes, c.Routing.FairWeights)
	}
	if !slices.Equal(c.Worker.Queues, []string{"gpu", "default"}) || !slices.Equal(c.Worker.PriorityWeights, []int{8, 4, 2, 1}) {
		t.Errorf("worker.queues %v, priority_weights %v", c.Worker.Queues, c.Worker.PriorityWeights)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"types:\n  bill:\n    fair_key: customer\n", `types.bill.fair_key = "customer"`},
		{"types:\n  bill:\n    fair_key: payload.\n", `types.bill.fair_key = "payload."`},
		{"types:\n  bill:\n    priority: urgent\n", `types.bill.priority = "urgent"`},
		{"types:\n  bill:\n    queue: Big_Queue\n", `types.bill.queue = "Big_Queue"`},
		{"types:\n  bill:\n    lane: 3\n", `unknown key "types.bill.lane"`},
		{"fairness:\n  lanes: 65\n", "fairness.lanes"},
	} {
		t.Run(bad.want, func(t *testing.T) {
			_, err := load(t, bad.yaml, nil)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %s", err, bad.want)
			}
		})
	}
}

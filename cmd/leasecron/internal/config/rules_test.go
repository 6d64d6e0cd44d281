package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/schedule"
)

// One task-type rule: a type can be scheduled exactly when a handler can be
// configured for it under that very name, in the file and in the
// environment. Before, "Report.Daily" (and "2fa", and 64-character names)
// could be scheduled but never handled.
func TestSchedulableTypesAreExactlyTheConfigurableOnes(t *testing.T) {
	for _, typ := range []string{
		"mail", "report-daily", "report_daily", "2fa", strings.Repeat("x", 64),
		"Report.Daily", "report.daily", "Mail", "send mail", "-x", strings.Repeat("x", 65),
	} {
		t.Run(typ, func(t *testing.T) {
			schedulable := schedule.ValidateType(typ) == nil
			inFile := configures(t, "handlers:\n  \""+typ+"\":\n    kind: log\n", nil, typ)
			inEnv := configures(t, "", map[string]string{"LEASECRON_HANDLERS_" + strings.ToUpper(typ) + "_KIND": "log"}, typ)
			if schedulable != inFile || schedulable != inEnv {
				t.Errorf("type %q: schedulable %v, configurable in a file %v, in the environment %v; want all alike", typ, schedulable, inFile, inEnv)
			}
		})
	}
}

// configures reports whether the configuration loads with a handler for
// exactly typ.
func configures(t *testing.T, yaml string, env map[string]string, typ string) bool {
	t.Helper()
	var ok bool
	t.Run("", func(t *testing.T) {
		c, err := load(t, yaml, env)
		_, ok = c.Handlers[typ]
		ok = ok && err == nil
	})
	return ok
}

// An exec handler without a timeout may run as long as any handler may
// (worker.max_run_time), not the exec handler's own 5-minute default; a
// timeout beyond worker.max_run_time, which would be cut short anyway, is
// refused by name.
func TestExecTimeoutFollowsMaxRunTime(t *testing.T) {
	c, err := load(t, "handlers:\n  report:\n    exec: [\"/bin/true\"]\n  hook:\n    http: https://example.invalid/\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Handlers["report"].Timeout; got != 30*time.Minute {
		t.Errorf("exec handler timeout %v, want worker.max_run_time's default 30m", got)
	}
	if got := c.Handlers["hook"].Timeout; got != 0 {
		t.Errorf("http handler timeout %v, want 0 (the http handler's own default)", got)
	}
	c, err = load(t, "worker:\n  max_run_time: 2h\nhandlers:\n  report:\n    exec: [\"/bin/true\"]\n  short:\n    exec: [\"/bin/true\"]\n    timeout: 10m\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Handlers["report"].Timeout; got != 2*time.Hour {
		t.Errorf("exec handler timeout %v, want worker.max_run_time 2h", got)
	}
	if got := c.Handlers["short"].Timeout; got != 10*time.Minute {
		t.Errorf("exec handler with timeout 10m: %v", got)
	}
	_, err = load(t, "handlers:\n  report:\n    exec: [\"/bin/true\"]\n    timeout: 1h\n", nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `handlers.report.timeout = "1h"`) || !strings.Contains(err.Error(), "worker.max_run_time (30m)") {
		t.Errorf("timeout above worker.max_run_time: %v, want an error naming both", err)
	}
}

// `leasecron config` shows handler headers (Authorization, API keys)
// redacted, and durations as a configuration file spells them.
func TestRedactedHidesHeadersAndSpellsDurations(t *testing.T) {
	v := NewViper()
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	file := writeFile(t, "handlers:\n  hook:\n    http: https://example.invalid/\n    headers:\n      Authorization: Bearer s3cr3t\n")
	if _, err := Load(v, file); err != nil {
		t.Fatal(err)
	}
	m := Redacted(v)
	h := m["handlers"].(map[string]any)["hook"].(map[string]any)["headers"].(map[string]any)
	if got := h["authorization"]; got != "REDACTED" {
		t.Errorf("header shown as %v, want REDACTED", got)
	}
	if got := m["lease"].(map[string]any)["duration"]; got != "60s" {
		t.Errorf("lease.duration shown as %v (%T), want 60s", got, got)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[any]string{
		time.Duration(0): "0s", 60 * time.Second: "60s", 90 * time.Second: "90s", 2 * time.Minute: "2m",
		30 * time.Minute: "30m", time.Hour: "1h", 200 * time.Millisecond: "200ms", 1500 * time.Microsecond: "1.5ms",
		8: "8", true: "true", "leasecron": "leasecron",
	} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			if got := formatValue(v); got != want {
				t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
			}
		})
	}
}

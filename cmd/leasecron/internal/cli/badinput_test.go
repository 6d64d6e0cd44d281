package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// Each bad value a new user may give is refused with exit 2 before
// anything touches storage (none is configured here), naming the flag and
// the value as given. Each case was accepted, or refused in other terms
// (exit 1 for want of a storage account, the library's "delay" for
// --for, "-1h0m0s" for "-1h"), before.
func TestBadValuesNameTheFlagAndExit2(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		// An empty value is not a flag left out: it was a task due now,
		// a one-off task, no parents, one stray task for --file "".
		{[]string{"schedule", "--in", "", "x"}, `--in "": empty`},
		{[]string{"schedule", "--at", "", "x"}, `--at "": empty`},
		{[]string{"schedule", "--id", "", "x"}, `--id "": empty`},
		{[]string{"schedule", "--type", "", "x"}, `--type "": empty`},
		{[]string{"schedule", "--every", "", "x"}, `--every "": empty`},
		{[]string{"schedule", "--cron", "", "x"}, `--cron "": empty`},
		{[]string{"schedule", "--after", ",", "x"}, `--after ",": empty`},
		{[]string{"schedule", "--unique-key", "", "x"}, `--unique-key "": empty`},
		{[]string{"schedule", "--file", ""}, `--file "": empty`},
		{[]string{"schedule", "--file", dir}, `--file "` + dir + `" is a directory`},
		{[]string{"schedule", "--replace", "x"}, "--replace goes with --id"},
		{[]string{"schedule", "--max-attempts", "-1", "x"}, `--max-attempts "-1": want 0 (retry.max_attempts) to 1000`},
		{[]string{"schedule", "--at", "0001-01-01T00:00:00Z", "x"}, `time "0001-01-01T00:00:00Z" is the zero time`},
		{[]string{"schedule", "--unique-key", "k", "--unique-for", "-1h", "x"}, `--unique-for "-1h"`},
		{[]string{"schedule", "--unique-key", "k", "--unique-for", "10", "x"}, `"10" for "--unique-for" flag: want a duration`},
		{[]string{"schedule", "--unique-key", "k", "--unique-states", ",,", "x"}, `--unique-states ",,"`},
		{[]string{"reschedule", "x", "--in", ""}, `--in "": empty`},
		{[]string{"cancel", ""}, `task id "": empty`},
		{[]string{"status", " "}, `task id " ": empty`},
		{[]string{"disable", ""}, `task id "": empty`},
		{[]string{"batch", "a/b"}, `batch id: invalid: task id "a/b"`},
		{[]string{"list", "--limit", "0"}, "--limit 0: want 1..1000"},
		{[]string{"runs", "--type", "Report"}, `--type: invalid: task type "Report"`},
		{[]string{"runs", "--batch", "a/b"}, `--batch: invalid: task id "a/b"`},
		{[]string{"runs", "--since", "-1h"}, `--since "-1h"`},
		{[]string{"audit", "--since", "-1h"}, `--since "-1h"`},
		{[]string{"audit", "--since", "0s"}, `--since "0s": want a positive duration`},
		{[]string{"runs", "--since", "0s"}, `--since "0s": want a positive duration`},
		{[]string{"bulk", "requeue-dead", "--since", ""}, `--since "": empty`},
		{[]string{"bulk", "requeue-dead", "--since", "yesterday"}, `--since: bulk requeue-dead: "yesterday": want a duration`},
		{[]string{"bulk", "cancel", "--type", "Report"}, `--type: bulk cancel-pending: invalid: task type "Report"`},
		{[]string{"bulk", "cancel", "--type", "report", "--yes", "--wait", "-1m"}, `--wait "-1m"`},
		{[]string{"bulk", "status", "a/b"}, `bulk operation id "a/b"`},
		{[]string{"drain", "w-1", "--wait", "-1s"}, `--wait "-1s"`},
		{[]string{"blackboard", "add", "k", "--type", "t", "--every", "-1h"}, `--every "-1h": want a positive interval`},
		{[]string{"blackboard", "add", "k", "--type", "t", "--every", "0s"}, `--every "0s": want a positive interval`},
		// pause --for "" paused until resumed; its other refusals spoke of
		// --at, --in and a "delay".
		{[]string{"pause", "report", "--for", ""}, `--for "": empty`},
		{[]string{"pause", "report", "--until", ""}, `--until "": empty`},
		{[]string{"pause", "report", "--for", "-1m"}, `--for "-1m": want a positive duration`},
		{[]string{"pause", "report", "--until", "tomorrow"}, `--until "tomorrow": want an RFC 3339 time`},
		{[]string{"pause", "report", "--for", "1m", "--until", "2030-01-01T00:00:00Z"}, "give --until"},
		{[]string{"resume", "--queue", ""}, `--queue "": empty`},
		// --types "" made a token for every type; "Bad" one for none.
		{[]string{"tokens", "create", "ci", "--role", "viewer", "--types", ""}, `--types "": no task type`},
		{[]string{"tokens", "create", "ci", "--role", "viewer", "--types", ","}, `--types ",": no task type`},
		{[]string{"tokens", "create", "ci", "--role", "viewer", "--types", "mail,Bad"}, `task type "Bad"`},
		{[]string{"azurite", "--blob-port", "-1"}, `--blob-port "-1": want a port`},
		{[]string{"azurite", "--table-port", "70000"}, `--table-port "70000": want a port`},
		{[]string{"healthcheck", "--url", "nonsense"}, `--url "nonsense": want an http(s) URL`},
		{[]string{"config", "--markdown"}, "--markdown goes with --keys"},
		{[]string{"config", "--keys", "--json"}, "give --keys or --json, not both"},
		{[]string{"--log-level", "loud", "list"}, `--log-level "loud": want one of debug, info, warn, error`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := run(t, "", tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d naming %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// A worker whose run records would be cleaned before a retry comes back
// is refused in the configuration's terms (the library names its Go
// options), and before it connects to anything.
func TestWorkerRetentionShorterThanBackoffNamesTheKeys(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("LEASECRON_RUNS_RETENTION", "1m")
	code, _, stderr := run(t, "", "worker")
	if code != exitError || !strings.Contains(stderr, `runs.retention = "60s": want at least retry.backoff_max (10m)`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	// Other commands do not use retry.*: they take it.
	if code, _, stderr := run(t, "", "config"); code != exitOK {
		t.Fatalf("config: exit %d, %s", code, stderr)
	}
}

// Ids and keys no task or entry can have exit 2 — they were exit 1, as if
// storage had failed — and a bad filter or token writes nothing.
func TestInvalidIDsAndTokensExit2(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "a/b"}, `task id "a/b"`},
		{[]string{"cancel", "a/b"}, `task id "a/b"`},
		{[]string{"reschedule", "a/b", "--in", "1m"}, `task id "a/b"`},
		{[]string{"blackboard", "remove", "a/b"}, `blackboard key "a/b"`},
		{[]string{"blackboard", "run-now", "a/b"}, `blackboard key "a/b"`},
		{[]string{"list", "--continue", "garbage"}, `--continue: invalid: list continuation "garbage"`},
	} {
		code, _, stderr := run(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("leasecron %s: exit %d, stderr %q; want %d naming %q", strings.Join(tc.args, " "), code, stderr, exitUsage, tc.want)
		}
	}
	// Nothing refused above, nor an empty value, was written.
	if code, _, stderr := run(t, "", "schedule", "--in", "", "x"); code != exitUsage {
		t.Fatalf("schedule --in \"\": exit %d, %s", code, stderr)
	}
	if code, out, _ := run(t, "", "list"); code != exitOK || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("list after refusals: exit %d\n%s", code, out)
	}
}

// The audit log's "more:" line is one shell word that, pasted, gives the
// next page: the store's token holds a newline, and the line printed it
// in two (its first half then failed with a storage error, exit 1).
func TestAuditNextPageTokenPastes(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		if code, _, stderr := run(t, "", "schedule", "--id", id, "--in", "1h"); code != exitOK {
			t.Fatalf("schedule %s: %s", id, stderr)
		}
	}
	code, out, stderr := run(t, "", "audit", "--limit", "1")
	m := regexp.MustCompile(`(?m)^more: leasecron audit --limit 1 --continue (\S+)$`).FindStringSubmatch(stderr)
	if code != exitOK || m == nil || !strings.Contains(out, "a-3") {
		t.Fatalf("audit --limit 1: exit %d, out %q, stderr %q: want a-3 and a one-line more: hint", code, out, stderr)
	}
	code, out, stderr = run(t, "", "audit", "--limit", "1", "--continue", m[1])
	if code != exitOK || !strings.Contains(out, "a-2") {
		t.Fatalf("audit --continue %s: exit %d, out %q, stderr %q: want a-2", m[1], code, out, stderr)
	}
	// What the schedule refuses of a field is named by its flag, not by
	// the task spec's field: a window longer than the run records are
	// kept (7 days), and a parent no task has.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "--unique-key", "k", "--unique-for", "720h", "x"}, "--unique-for: "},
		{[]string{"schedule", "--after", "nosuch", "x"}, "--after: "},
	} {
		if code, _, stderr := run(t, "", c.args...); code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "unique_for") {
			t.Errorf("leasecron %s: exit %d, stderr %q; want 2 naming %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
	// A token no page gave is the user's mistake, named (exit 2), not a
	// storage failure.
	code, _, stderr = run(t, "", "audit", "--continue", "garbage")
	if code != exitUsage || !strings.Contains(stderr, `--continue: invalid run argument: continuation token "garbage" was not returned by an audit log page`) {
		t.Fatalf("audit --continue garbage: exit %d, stderr %q; want 2 naming the token", code, stderr)
	}
}

// A file whose middle line is bad is refused by its line number, and the
// good lines around it are not written.
func TestScheduleFileBadMiddleLineWritesNothing(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	body := `{"id":"f-1","in":"1h"}` + "\n" + `{"in":"soon"}` + "\n" + `{"id":"f-3","queue":"GPU"}` + "\n" + `{"id":"f-4","in":"1h"}` + "\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "", "schedule", "--file", file)
	if code != exitUsage || !strings.Contains(out, `line 2: (no id) invalid: in: invalid: delay "soon"`) ||
		!strings.Contains(out, `line 3: f-3 invalid:`) || !strings.Contains(out, `queue name "GPU"`) {
		t.Fatalf("exit %d, out %q, stderr %q", code, out, stderr)
	}
	for _, id := range []string{"f-1", "f-4"} {
		if code, _, _ := run(t, "", "status", id); code != exitNotFound {
			t.Errorf("status %s: exit %d; want %d: nothing of the file written", id, code, exitNotFound)
		}
	}
}

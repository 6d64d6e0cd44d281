package cli

import (
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// Every "no such task, key, dead letter or paused type" exits with code 3,
// whichever package reported it: Main maps leasecrontype.ErrNotFound once.
func TestUnknownIDsExitWithCode3(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, cmd := range [][]string{
		{"status", "nosuch"},
		{"cancel", "nosuch"},
		{"reschedule", "nosuch", "--in", "1m"},
		{"aggregator", "remove", "nosuch"},
		{"blackboard", "run-now", "nosuch"},
		{"deadletter", "requeue", "nosuch"},
		{"resume", "nosuch"},
		{"drain", "nosuch"},
	} {
		code, _, stderr := run(t, "", cmd...)
		if code != exitNotFound {
			t.Errorf("leasecron %s: exit %d, want %d; stderr %q", strings.Join(cmd, " "), code, exitNotFound, stderr)
		}
	}
	if code, _, stderr := run(t, "", "schedule", "--type", "Report.Daily", "x"); code != exitUsage || !strings.Contains(stderr, `"Report.Daily"`) {
		t.Errorf("schedule --type Report.Daily: exit %d, stderr %q; want %d naming the type", code, stderr, exitUsage)
	}
}

// A fresh account has times that never happened: the CLI says "never" and
// its JSON leaves them out, rather than printing the zero time.
func TestAbsentTimesSayNever(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, cmd := range [][]string{
		{"stats"}, {"stats", "--json"}, {"leader"}, {"leader", "--json"}, {"runs"}, {"runs", "--json"},
		{"blackboard"}, {"blackboard", "--json"}, {"paused"}, {"deadletter", "list"}, {"list"},
	} {
		code, out, stderr := run(t, "", cmd...)
		if code != exitOK {
			t.Fatalf("leasecron %s: exit %d; stderr %q", strings.Join(cmd, " "), code, stderr)
		}
		if strings.Contains(out, "0001-01-01") || strings.Contains(out, "1754-") {
			t.Errorf("leasecron %s prints a zero time:\n%s", strings.Join(cmd, " "), out)
		}
	}
	if _, out, _ := run(t, "", "stats"); !strings.Contains(out, "last flush never") {
		t.Errorf("stats on a fresh account: want last flush never:\n%s", out)
	}
	if code, _, stderr := run(t, "", "aggregator", "add", "k", "--every", "1h", "--type", "t"); code != exitOK {
		t.Fatalf("aggregator add: exit %d; %s", code, stderr)
	}
	if _, out, _ := run(t, "", "blackboard"); !strings.Contains(out, "never") {
		t.Errorf("a key that never ran: want never for its start and stop:\n%s", out)
	}
	if _, out, _ := run(t, "", "blackboard", "--json"); strings.Contains(out, `"start"`) || strings.Contains(out, "0001-01-01") {
		t.Errorf("a key that never ran: its JSON has a start:\n%s", out)
	}
	// A series' status shows its next occurrences in its own zone.
	if code, _, stderr := run(t, "", "schedule", "--id", "ny", "--type", "t", "--cron", "0 9 * * *", "--tz", "America/New_York"); code != exitOK {
		t.Fatalf("schedule: exit %d; %s", code, stderr)
	}
	_, out, _ := run(t, "", "status", "ny")
	if n := strings.Count(out, " 09:00 E"); n != upcomingShown || !strings.Contains(out, "next") {
		t.Errorf("status of a series: want %d next occurrences at 09:00 New York time:\n%s", upcomingShown, out)
	}
	if _, out, _ := run(t, "", "status", "ny", "--json"); !strings.Contains(out, `"next_occurrences"`) || !strings.Contains(out, "T09:00:00-0") {
		t.Errorf("status --json of a series: want next_occurrences in its zone:\n%s", out)
	}
}

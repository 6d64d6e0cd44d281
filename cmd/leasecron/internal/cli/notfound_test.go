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

package cli

import (
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// Without run records (worker.runs: false) a command that needs them
// fails with exit 1 naming the key, as a configuration error does: not 3
// (no such thing), not 2 with a usage line, and not "stopped ... run it
// again", which a rerun would not mend (a helper's review found all three).
func TestCommandsThatNeedRunRecordsSaySoWhenTheyAreOff(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("LEASECRON_WORKER_RUNS", "false")
	for _, cmd := range [][]string{
		{"batch", "b1"}, {"bulk", "list"}, {"runs", "clean"}, {"migrate"}, {"runs"}, {"audit"},
	} {
		code, _, stderr := run(t, "", cmd...)
		if code != exitError || !strings.Contains(stderr, "worker.runs: false") ||
			strings.Contains(stderr, "Usage:") || strings.Contains(stderr, "stopped") {
			t.Errorf("leasecron %s with runs off: exit %d, stderr %q; want %d naming worker.runs: false",
				strings.Join(cmd, " "), code, stderr, exitError)
		}
	}
}

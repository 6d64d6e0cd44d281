package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// The bulk commands count without --yes, start with it, and show the
// operation; bad filters exit 2 naming what is wrong. (Running the
// operation is a worker's part: tested with the library and end to end.)
func TestBulkCommands(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, id := range []string{"r-1", "r-2", "r-3", "x-1"} {
		if code, _, stderr := run(t, "", "schedule", "--id", id, "--type", "report", "--in", "1h"); code != exitOK {
			t.Fatalf("schedule %s: %s", id, stderr)
		}
	}
	code, out, stderr := run(t, "", "bulk", "cancel", "--type", "report", "--id-prefix", "r-")
	if code != exitOK || !strings.Contains(out, "3 pending task(s) match cancel-pending type:report id:r-*; add --yes") {
		t.Fatalf("count: exit %d %q %q", code, out, stderr)
	}
	code, out, stderr = run(t, "", "bulk", "cancel", "--type", "report", "--id-prefix", "r-", "--yes")
	m := regexp.MustCompile(`started (bulk-\S+) \(cancel-pending type:report id:r-\*\) on 3 matching`).FindStringSubmatch(out)
	if code != exitOK || m == nil {
		t.Fatalf("start: exit %d %q %q", code, out, stderr)
	}
	code, out, _ = run(t, "", "bulk", "status", m[1], "--json")
	var b struct {
		ID, State, By string
		Expect        int
	}
	if code != exitOK || json.Unmarshal([]byte(out), &b) != nil || b.ID != m[1] || b.State != "running" || b.Expect != 3 || b.By == "" {
		t.Errorf("status: exit %d %s", code, out)
	}
	if code, out, _ = run(t, "", "bulk", "list"); code != exitOK || !strings.Contains(out, m[1]) {
		t.Errorf("list: exit %d %s", code, out)
	}
	if code, _, _ = run(t, "", "bulk", "status", "bulk-nope"); code != exitNotFound {
		t.Errorf("status of an unknown operation: exit %d, want %d", code, exitNotFound)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bulk", "cancel"}, "give a type, an id prefix or a queue"},
		{[]string{"bulk", "disable"}, "give the type"},
		{[]string{"bulk", "requeue-dead", "--type", "Bad Type"}, `"Bad Type"`},
		{[]string{"bulk", "requeue-dead", "--since", "yesterday"}, `--since: bulk requeue-dead: "yesterday": want a duration`},
		{[]string{"bulk", "requeue-dead", "--since", "1h", "--until", "2h"}, "is not before until"},
		{[]string{"bulk", "cancel", "--type", "report", "--wait", "1m"}, "add --yes"},
	} {
		if code, _, stderr := run(t, "", c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("leasecron %s: exit %d %q, want %d naming %q", strings.Join(c.args, " "), code, stderr, exitUsage, c.want)
		}
	}
}

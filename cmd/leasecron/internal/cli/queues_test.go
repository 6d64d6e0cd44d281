package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// schedule --queue, --priority and --fair-key send a task due now to its
// route's work queue, and `leasecron queues` shows it there with its
// depth; bad routes exit 2 naming the value and what is accepted.
func TestQueuesCommandShowsRoutes(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("LEASECRON_TYPES_MAIL_PRIORITY", "low")
	for _, args := range [][]string{
		{"schedule", "--id", "g-1", "--type", "render", "--queue", "gpu", "--priority", "critical", "--in", "0s"},
		{"schedule", "--id", "g-2", "--type", "render", "--queue", "gpu", "--priority", "1", "--fair-key", "tenant-7", "--in", "0s"},
		{"schedule", "--id", "m-1", "--type", "mail", "--in", "0s"},
		{"schedule", "--id", "d-1", "--type", "other", "--in", "0s"},
	} {
		if code, _, stderr := run(t, "", args...); code != exitOK {
			t.Fatalf("%s: exit %d %s", strings.Join(args, " "), code, stderr)
		}
	}
	code, out, stderr := run(t, "", "queues", "--json")
	var qs []struct {
		Queue      string   `json:"queue"`
		Priority   int      `json:"priority"`
		Depth      int      `json:"depth"`
		WorkQueues []string `json:"work_queues"`
		Lanes      int      `json:"lanes"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &qs) != nil {
		t.Fatalf("queues --json: exit %d %q %q", code, out, stderr)
	}
	got := map[string]int{}
	for _, q := range qs {
		got[q.Queue+"/"+string(rune('0'+q.Priority))] = q.Depth
		if q.Queue == "gpu" && (q.Lanes != 1 || len(q.WorkQueues) != 2) {
			t.Errorf("gpu/1 has %d lanes in %v, want 1 lane beside its base queue", q.Lanes, q.WorkQueues)
		}
	}
	for route, want := range map[string]int{"gpu/1": 2, "default/4": 1, "default/3": 1} {
		if got[route] != want {
			t.Errorf("queues: %s holds %d, want %d (all: %v)", route, got[route], want, got)
		}
	}
	code, out, _ = run(t, "", "queues")
	if code != exitOK || !strings.Contains(out, "NONE (stranded: no running worker consumes gpu)") {
		t.Errorf("queues: exit %d %s; want gpu shown stranded (no worker runs)", code, out)
	}
	// Bulk cancel and pause select by queue.
	for _, args := range [][]string{
		{"schedule", "--id", "later-g", "--type", "render", "--queue", "gpu", "--in", "1h"},
		{"schedule", "--id", "later-d", "--type", "render", "--in", "1h"},
	} {
		if code, _, stderr := run(t, "", args...); code != exitOK {
			t.Fatalf("%s: exit %d %s", strings.Join(args, " "), code, stderr)
		}
	}
	// g-1 and g-2 (sent, their rows not yet moved: no worker runs) and
	// later-g; not later-d, m-1 or d-1.
	if code, out, stderr := run(t, "", "bulk", "cancel", "--queue", "gpu"); code != exitOK || !strings.Contains(out, "3 pending task(s) match cancel-pending queue:gpu") {
		t.Errorf("bulk cancel --queue gpu: exit %d %q %q; want 3 matches", code, out, stderr)
	}
	if code, out, stderr := run(t, "", "pause", "--queue", "gpu", "--for", "1h"); code != exitOK || !strings.Contains(out, "queue gpu paused until") {
		t.Errorf("pause --queue gpu: exit %d %q %q", code, out, stderr)
	}
	if code, out, _ := run(t, "", "paused", "--json"); code != exitOK || !strings.Contains(out, `"queue:gpu"`) {
		t.Errorf("paused --json: exit %d %s; want queue:gpu", code, out)
	}
	if code, out, stderr := run(t, "", "resume", "--queue", "gpu"); code != exitOK || !strings.Contains(out, "queue gpu resumed") {
		t.Errorf("resume --queue gpu: exit %d %q %q", code, out, stderr)
	}
	if code, _, _ := run(t, "", "resume", "--queue", "gpu"); code != exitNotFound {
		t.Errorf("resume --queue gpu again: exit %d, want %d (not paused)", code, exitNotFound)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "give a TYPE or --queue NAME"},
		{[]string{"pause", "mail", "--queue", "gpu"}, "give a TYPE or --queue NAME"},
		{[]string{"pause", "--queue", "Bad"}, `"Bad"`},
		{[]string{"bulk", "cancel", "--queue", "p2"}, "reserved for priority levels"},
		{[]string{"schedule", "--queue", "GPU", "x"}, `"GPU"`},
		{[]string{"schedule", "--queue", "p1", "x"}, "reserved for priority levels"},
		{[]string{"schedule", "--priority", "urgent", "x"}, `"urgent": want 1 (critical), 2 (high), 3 (default) or 4 (low)`},
		{[]string{"schedule", "--priority", "5", "x"}, `"5"`},
	} {
		if code, _, stderr := run(t, "", c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("leasecron %s: exit %d %q, want %d naming %q", strings.Join(c.args, " "), code, stderr, exitUsage, c.want)
		}
	}
}

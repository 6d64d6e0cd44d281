package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// status names a task's type once, and the run's as its own line only
// when a replace gave the pending row another.
func TestStatusNamesTheTypeOnce(t *testing.T) {
	due := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	run := &leasecron.Run{ID: "r", Type: "email", State: leasecron.RunFailed, Attempts: 1, Worker: "w1"}
	for _, c := range []struct {
		name    string
		st      leasecron.Status
		want    []string
		wantNot []string
	}{
		{"a retry waiting", leasecron.Status{ID: "r", Pending: &leasecron.Item{ID: "r", Type: "email", Due: due}, Run: run},
			[]string{"type      email\n", "attempts  1\n"}, []string{"run type"}},
		{"a run alone", leasecron.Status{ID: "r", Run: run}, []string{"type      email\n"}, []string{"run type"}},
		{"a replace of another type", leasecron.Status{ID: "r", Pending: &leasecron.Item{ID: "r", Type: "sms", Due: due}, Run: run},
			[]string{"type      sms\n", "run type  email\n"}, nil},
	} {
		var b strings.Builder
		printStatus(&b, c.st)
		out := b.String()
		if n := strings.Count(out, "\ntype "); n != 1 {
			t.Errorf("%s: %d type lines, want 1:\n%s", c.name, n, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: want %q in:\n%s", c.name, w, out)
			}
		}
		for _, w := range c.wantNot {
			if strings.Contains(out, w) {
				t.Errorf("%s: want no %q in:\n%s", c.name, w, out)
			}
		}
	}
}

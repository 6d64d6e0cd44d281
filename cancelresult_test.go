package leasecron_test

import (
	"strings"
	"testing"

	"github.com/leasecron/leasecron"
)

// A cancel after the move says that a run already started goes on (the
// CLI and the dashboard said only that the worker acknowledges it without
// running, of any run the cancel marked: a review's find).
func TestCancelResultSaysWhatTheCancelDid(t *testing.T) {
	if got := (leasecron.CancelResult{ID: "a", Removed: true}).String(); got != "cancelled a (removed from the schedule)" {
		t.Errorf("removed: %q", got)
	}
	got := (leasecron.CancelResult{ID: "b", Marked: true}).String()
	for _, want := range []string{"cancelled b", "already in the queue", "acknowledges it without running", "already started goes on"} {
		if !strings.Contains(got, want) {
			t.Errorf("marked: %q; want %q in it", got, want)
		}
	}
}

package leasecron

import (
	"errors"
	"testing"

	"github.com/leasecron/leasecron/schedule"
)

// A pass held back by backpressure keeps its shard polled only when rows
// are due in it: a quiet shard's sweep pass during a backlog (queue
// deeper than queue.max_depth) would otherwise poll it every poll until
// the queue drained (a review of the quiet shards' sweep).
func TestAHeldBackPassOfAShardWithNothingDueLetsItGoQuiet(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    schedule.PassReport
		want bool
	}{
		{"held back, nothing due", schedule.PassReport{Busy: true, HeldBack: true}, false},
		{"held back, rows due", schedule.PassReport{Busy: true, HeldBack: true, Rows: 3}, true},
		{"moved a row", schedule.PassReport{Busy: true}, true},
		{"failed", schedule.PassReport{Busy: true, Err: errors.New("busy")}, true},
		{"nothing", schedule.PassReport{}, false},
	} {
		if got := gateBusy(tc.r); got != tc.want {
			t.Errorf("%s: busy %v, want %v", tc.name, got, tc.want)
		}
	}
}

package runs

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// MarkQueuedReport says which marks' writes failed with a fault that
// passes — those runs may have no record at all, and the mover holds
// their rows (issue 38, sweep seeds 68455, 68031: moved unrecorded, a
// parent looked cancelled to the traffic cop watching it) — and not a
// mark refused by the record it found (another scheduling's run under
// way: that run has a record).
func TestMarkQueuedReportsWritesThatFailed(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(clock.NewFake(t0))
	due := t0.Add(-time.Second)
	if _, err := m.Claim(ctx, "busy", "w", 1, t0.Add(time.Minute), Meta{Type: "a", Due: due.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	m.mt.BeforeSubmit(func([]table.Op) error {
		if fail.Load() {
			return fmt.Errorf("%w: injected", storage.ErrServerBusy)
		}
		return nil
	})
	marks := []Mark{{"busy", Meta{Type: "a", Due: due}}, {"fresh", Meta{Type: "a", Due: due}}}
	fail.Store(true)
	marked, failed := m.MarkQueuedReport(ctx, marks)
	if !slices.Equal(marked, []bool{false, false}) || !slices.Equal(failed, []bool{true, true}) {
		t.Fatalf("marks whose writes failed: marked %v, failed %v; want none marked, both failed", marked, failed)
	}
	fail.Store(false)
	marked, failed = m.MarkQueuedReport(ctx, marks)
	if !slices.Equal(marked, []bool{false, true}) || !slices.Equal(failed, []bool{false, false}) {
		t.Fatalf("marks answered: marked %v, failed %v; want the fresh run marked, the one behind a run under way refused, none failed", marked, failed)
	}
}

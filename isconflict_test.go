package leasecron_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
)

// IsConflict is the one list of states the HTTP API and the dashboard
// answer 409 (the two kept their own, which drifted apart).
func TestIsConflictTellsStatesFromFailures(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("cancel a: %w", leasecron.ErrAlreadyFinished),
		fmt.Errorf("schedule a: %w", leasecron.ErrAlreadyScheduled),
		fmt.Errorf("reschedule a: %w", leasecron.ErrAlreadySent),
		leasecron.ErrBeingCancelled,
		fmt.Errorf("runs: %w", leasecron.ErrNoRunRecords),
		&leasecron.DuplicateError{ID: "b", Key: "k"},
		fmt.Errorf("requeue d: %w", queue.ErrNotRequeueable),
	} {
		if !leasecron.IsConflict(err) {
			t.Errorf("%v: not a conflict", err)
		}
	}
	for _, err := range []error{leasecron.ErrNotFound, leasecron.ErrServerBusy, errors.New("connection reset"), leasecron.ErrInvalidTask} {
		if leasecron.IsConflict(err) {
			t.Errorf("%v: taken for a conflict", err)
		}
	}
}

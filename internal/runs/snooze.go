package runs

import (
	"context"
	"time"

	"github.com/leasecron/leasecron/internal/trunc"
)

// propSnoozedUntil is the row property of Run.SnoozedUntil.
const propSnoozedUntil = "SnoozedUntil"

// applySnooze computes the row Snooze writes: the attempt ended without an
// outcome and the run waits until until. Attempts and LastError are left as
// they are (a snooze is not a failure); a cancelled run stays cancelled.
func applySnooze(cur *Run, id string, until time.Time, tail string, now time.Time) Run {
	next := Run{ID: id}
	if cur != nil {
		next = *cur
	}
	if next.State != Cancelled {
		next.State = Snoozed
	}
	next.SnoozedUntil = until
	next.Finished = now
	next.ClaimUntil = now
	if tail != "" {
		next.OutputTail = trunc.Tail(tail, MaxOutputTail)
	}
	return next
}

// Snooze records that the running attempt of id snoozed until until
// (queue.RunRecorder).
func (s *Store) Snooze(ctx context.Context, id string, until time.Time, outputTail string) error {
	if err := validateID(id); err != nil {
		return err
	}
	return s.modify(ctx, id, func(cur *Run) (Run, error) {
		return applySnooze(cur, id, until, outputTail, s.o.Clock.Now()), nil
	})
}

// Snooze implements Store.Snooze.
func (m *Mem) Snooze(_ context.Context, id string, until time.Time, outputTail string) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.put(applySnooze(m.cur(id), id, until, outputTail, m.clk.Now()))
	return nil
}

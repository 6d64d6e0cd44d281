package leasecrontype

import (
	"errors"
	"fmt"
	"time"
)

// SnoozeError is what Snooze returns: a handler's way of saying "not yet,
// try again in Delay". It is not a failure: the attempt is not counted, the
// run shows RunSnoozed with SnoozedUntil, and LastError is left alone.
type SnoozeError struct {
	// Delay is how long to wait before the task runs again (at most a
	// week, the queue's longest invisibility; 0 runs it again at once).
	Delay time.Duration
}

// Error says for how long the task was snoozed.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.Delay) }

// Snooze returns the error a handler returns to run its task again after d
// without using an attempt ("the input lands in 10 minutes"):
//
//	return leasecrontype.Snooze(10 * time.Minute)
//
// A task may snooze a limited number of times (retry.max_snoozes, default
// 50); beyond that a snooze counts as a failed attempt. A negative d is
// taken as 0.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: max(d, 0)} }

// SnoozeOf reports whether err (or an error it wraps) is a snooze, and for
// how long.
func SnoozeOf(err error) (time.Duration, bool) {
	var se *SnoozeError
	if errors.As(err, &se) {
		return max(se.Delay, 0), true
	}
	return 0, false
}

package leasecron

import (
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Snooze returns the error a handler returns to run its task again after d
// without using an attempt and without an error in its history ("the
// input lands in 10 minutes"):
//
//	w.Handle("report", func(ctx context.Context, t leasecron.Task) error {
//		if !inputReady() {
//			return leasecron.Snooze(10 * time.Minute)
//		}
//		return build(ctx)
//	})
//
// The run shows RunSnoozed and SnoozedUntil until it runs again. One run
// may snooze WorkerOptions.Consumer.MaxSnoozes times (retry.max_snoozes, default
// 50); each snooze beyond is a failed attempt. Exec programs snooze by
// exiting with handler.ExitSnooze (75) and printing the delay as their last
// line; HTTP endpoints by answering 503 with Retry-After.
func Snooze(d time.Duration) error { return leasecrontype.Snooze(d) }

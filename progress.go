package leasecron

import (
	"context"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Progress reports how far the running task has come: percent from 0 to
// 100 and what it is doing now ("copied 420 of 1,000 files"). Call it as
// often as is convenient: the worker writes the latest report at most once
// per WorkerOptions.Consumer.ProgressEvery (worker.progress_every, default
// 5 s) and the last one when the attempt ends, into the run record, where
// `leasecron status`, `leasecron runs` and the dashboard show it (and
// Status returns it in Run.Progress) after the run has ended too.
//
//	w.Handle("import", func(ctx context.Context, t leasecron.Task) error {
//		for i, f := range files {
//			if err := copyFile(ctx, f); err != nil {
//				return err
//			}
//			_ = leasecron.Progress(ctx, (i+1)*100/len(files), fmt.Sprintf("copied %d of %d files", i+1, len(files)))
//		}
//		return nil
//	})
//
// A percent outside 0–100 is refused with an error wrapping
// ErrInvalidProgress; a message longer than
// leasecrontype.MaxProgressMessage bytes is cut. Outside a handler it does
// nothing. Exec handlers report with a line "leasecron-progress: 42
// message" on stdout or stderr, HTTP endpoints with a 1xx informational
// response carrying "Leasecron-Progress: 42 message" (see the README's
// Progress section).
func Progress(ctx context.Context, percent int, message string) error {
	return leasecrontype.ReportProgress(ctx, percent, message)
}

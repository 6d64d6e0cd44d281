package handler

import (
	"context"
	"errors"
	"io"

	"github.com/leasecron/leasecron/leasecrontype"
)

// ErrInvalidOptions is wrapped by every validation error of Exec and HTTP.
var ErrInvalidOptions = errors.New("invalid handler options")

// ErrTimeout is wrapped by the error of a run that exceeded its Timeout.
var ErrTimeout = errors.New("handler timed out")

// recordOutput writes a finished run's output tail to
// leasecrontype.Output(ctx), which the queue consumer keeps in the task's
// run record.
func recordOutput(ctx context.Context, output string) {
	_, _ = io.WriteString(leasecrontype.Output(ctx), output)
}

package handler

import (
	"context"
	"errors"
	"fmt"
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

// orDefault fills a zero option with its default and refuses a negative
// one with an error naming the field, the value and what is accepted.
func orDefault[T ~int | ~int64](field string, v *T, def T, what string) error {
	switch {
	case *v < 0:
		return fmt.Errorf("%w: %s %v is negative: want %s> 0, or 0 for the default %v", ErrInvalidOptions, field, *v, what, def)
	case *v == 0:
		*v = def
	}
	return nil
}

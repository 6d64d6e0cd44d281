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

// OutputSink receives the output tail of a finished run.
type OutputSink func(output string)

type sinkKey struct{}

// WithOutputSink returns a context whose handler runs report their output to
// sink. Exec and HTTP call it once per run, after the run ends, successful or
// not, with the tail of the output (possibly empty). The sink is called on
// the handler's goroutine and should not block.
func WithOutputSink(ctx context.Context, sink OutputSink) context.Context {
	return context.WithValue(ctx, sinkKey{}, sink)
}

// RecordOutput reports a finished run's output tail: to the sink in ctx
// when there is one (WithOutputSink), otherwise to leasecrontype.Output(ctx), which
// the queue consumer keeps in the task's run record. Custom handlers use it
// to report output the way Exec and HTTP do.
func RecordOutput(ctx context.Context, output string) {
	if sink, ok := ctx.Value(sinkKey{}).(OutputSink); ok && sink != nil {
		sink(output)
		return
	}
	_, _ = io.WriteString(leasecrontype.Output(ctx), output)
}

// OutputTail returns the output tail carried by err (an *ExecError or
// *HTTPError anywhere in its chain), or "" if it carries none.
func OutputTail(err error) string {
	var ee *ExecError
	if errors.As(err, &ee) {
		return ee.Tail
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Tail
	}
	return ""
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

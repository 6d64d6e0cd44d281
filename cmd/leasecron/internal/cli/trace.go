package cli

import (
	"context"
	"os"
	"time"

	"github.com/leasecron/leasecron/cmd/leasecron/internal/otelsetup"
)

// startTracing sets up OpenTelemetry traces from the standard OTEL_*
// variables when they ask for them (see otelsetup.Setup); the returned stop
// flushes the spans still buffered.
func (a *app) startTracing(ctx context.Context) (stop func(), err error) {
	shutdown, on, err := otelsetup.Setup(ctx, a.version, os.Getenv)
	if err != nil {
		return nil, usageError{err}
	}
	if on {
		a.log.Info("tracing on: spans go to the OTLP endpoint of the OTEL_* variables")
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			a.log.Warn("flushing trace spans failed", "err", err)
		}
	}, nil
}

package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// FromEnv returns ctx carrying the trace context of the TRACEPARENT (and
// TRACESTATE) variables, the convention for handing a trace to a command:
// a task scheduled by `leasecron schedule` run inside a traced script
// joins the script's trace.
func FromEnv(ctx context.Context, getenv func(string) string) context.Context {
	tp := strings.TrimSpace(getenv("TRACEPARENT"))
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": getenv("TRACESTATE")})
}

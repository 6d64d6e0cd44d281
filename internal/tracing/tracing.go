// Package tracing holds what leasecron's packages share about OpenTelemetry
// traces: the instrumentation name, the span attributes of a task, starting
// a task's span from the W3C traceparent its schedule row carried, and
// handing the current span to programs (TRACEPARENT) and endpoints
// (traceparent header). It uses the OpenTelemetry API only; the SDK is set
// up by the CLI (see Setup) or by an embedding program.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of leasecron's tracers.
const Name = "github.com/leasecron/leasecron"

// Span attribute keys of a task.
const (
	TaskID      = attribute.Key("leasecron.task.id")
	TaskType    = attribute.Key("leasecron.task.type")
	TaskAttempt = attribute.Key("leasecron.task.attempt")
	TaskSeries  = attribute.Key("leasecron.task.series")
	Outcome     = attribute.Key("leasecron.outcome")
	Generation  = attribute.Key("leasecron.generation")
)

// TaskAttrs are the attributes every span about a task carries.
func TaskAttrs(id, typ string, attempt int, series string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{TaskID.String(id), TaskType.String(typ), TaskAttempt.Int(attempt)}
	if series != "" {
		attrs = append(attrs, TaskSeries.String(series))
	}
	return attrs
}

// StartTask starts a span about a task whose schedule row carried the W3C
// traceparent tp (may be empty): a child of tp for a one-off task, and for
// an occurrence of a recurring series (recurring) a new root linked to tp,
// the series' trace, so that every occurrence is its own trace.
func StartTask(ctx context.Context, tr trace.Tracer, name, tp string, recurring bool, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	if tp != "" {
		parent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
		if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
			if recurring {
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}))
			} else {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
		}
	}
	return tr.Start(ctx, name, opts...)
}

// Env returns TRACEPARENT (and TRACESTATE) for the span in ctx, as
// KEY=value entries for a program's environment; nil without a valid span.
func Env(ctx context.Context) []string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	var env []string
	if v := c["traceparent"]; v != "" {
		env = append(env, "TRACEPARENT="+v)
	}
	if v := c["tracestate"]; v != "" {
		env = append(env, "TRACESTATE="+v)
	}
	return env
}

// Inject sets the traceparent (and tracestate) headers of the span in ctx.
func Inject(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

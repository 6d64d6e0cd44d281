// Package otelsetup configures the OpenTelemetry SDK for the leasecron
// command from the standard OTEL_* variables. The library depends on the
// OpenTelemetry API only (it takes a TracerProvider); choosing the SDK and
// its exporters is the program's part, and this is the program's.
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrConfig is wrapped by the errors of Setup about OTEL_* values.
var ErrConfig = errors.New("invalid OpenTelemetry configuration")

// Enabled reports whether the standard OTEL_* variables ask for traces:
// not OTEL_SDK_DISABLED=true and not OTEL_TRACES_EXPORTER=none, and either
// OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
// Anything else is off: tracing costs nothing unless configured.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: leasecron exports traces with otlp, or none", ErrConfig, exp)
	}
}

// Setup installs, when Enabled, an OpenTelemetry SDK tracer provider as
// the global one (and the W3C trace-context propagator): OTLP over
// http/protobuf, or gRPC with OTEL_EXPORTER_OTLP(_TRACES)_PROTOCOL=grpc;
// the exporter, the batch processor, the sampler (OTEL_TRACES_SAMPLER)
// and the resource (OTEL_SERVICE_NAME, default "leasecron";
// OTEL_RESOURCE_ATTRIBUTES) read their own OTEL_* variables. shutdown
// flushes and stops it (a no-op when tracing is off).
func Setup(ctx context.Context, version string, getenv func(string) string) (shutdown func(context.Context) error, enabled bool, err error) {
	noop := func(context.Context) error { return nil }
	if enabled, err = Enabled(getenv); err != nil || !enabled {
		return noop, false, err
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	var exp sdktrace.SpanExporter
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return noop, false, fmt.Errorf("%w: OTLP protocol %q: want http/protobuf or grpc", ErrConfig, proto)
	}
	if err != nil {
		return noop, false, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "leasecron"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return noop, false, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, true, nil
}

package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Tracing is off unless the OTEL_* variables ask for traces.
func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want bool
		err  bool
	}{
		{vars: nil, want: false},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: true},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: true},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: false},
		{vars: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
	} {
		got, err := Enabled(env(c.vars))
		if got != c.want || (err != nil) != c.err || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("Enabled(%v) = %v, %v", c.vars, got, err)
		}
	}
	if _, on, err := Setup(context.Background(), "test", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})); on || !errors.Is(err, ErrConfig) {
		t.Errorf("an unknown protocol: on %v, %v", on, err)
	}
}

// TRACEPARENT in the environment becomes the context's remote span.
func TestFromEnv(t *testing.T) {
	ctx := FromEnv(context.Background(), env(map[string]string{"TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("span context %v", sc)
	}
	if env := Env(ctx); len(env) != 1 || env[0] != "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("Env = %v", env)
	}
	if sc := trace.SpanContextFromContext(FromEnv(context.Background(), env(nil))); sc.IsValid() {
		t.Fatal("no TRACEPARENT gave a span context")
	}
}

package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

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

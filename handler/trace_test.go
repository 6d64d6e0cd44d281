package handler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/leasecrontype"
)

// spanCtx is a context holding a sampled span context.
func spanCtx(t *testing.T) (context.Context, string) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
}

// An exec program gets the run's span as TRACEPARENT; without a span it
// gets none, not even the worker's own.
func TestExecTraceParent(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", `printf '%s' "${TRACEPARENT-none}"`}})
	ctx, want := spanCtx(t)
	w := &countingWriter{}
	if err := h(leasecrontype.WithOutputWriter(ctx, w), sampleTask("")); err != nil {
		t.Fatal(err)
	}
	if w.got != want {
		t.Fatalf("TRACEPARENT = %q, want %q", w.got, want)
	}
	out, got := capture()
	if err := h(out, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	if s, _ := got(); s != "none" {
		t.Fatalf("without a span TRACEPARENT = %q, want none", s)
	}
}

// An HTTP endpoint gets the run's span as the traceparent header.
func TestHTTPTraceParent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("traceparent") }))
	defer srv.Close()
	h, err := HTTP(HTTPOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, want := spanCtx(t)
	if err := h(ctx, leasecrontype.Task{ID: "t", Type: "x", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if s := <-got; !strings.EqualFold(s, want) {
		t.Fatalf("traceparent header %q, want %q", s, want)
	}
}

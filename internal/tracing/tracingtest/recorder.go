// Package tracingtest records spans in memory for tests, over the
// OpenTelemetry API alone (the library links no SDK).
package tracingtest

import (
	"context"
	"crypto/rand"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Recorder is a trace.TracerProvider that keeps every span it starts.
type Recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*Span
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Tracer implements trace.TracerProvider.
func (r *Recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{r: r} }

// Ended returns the spans that have ended, in the order they started.
func (r *Recorder) Ended() []*Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Span
	for _, s := range r.spans {
		if s.ended {
			out = append(out, s)
		}
	}
	return out
}

type tracer struct {
	embedded.Tracer
	r *Recorder
}

func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	tid := parent.TraceID()
	if !parent.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	var sid trace.SpanID
	_, _ = rand.Read(sid[:])
	s := &Span{rec: t.r, name: name, parent: parent, kind: cfg.SpanKind(), links: cfg.Links(),
		attrs: append([]attribute.KeyValue(nil), cfg.Attributes()...),
		sc:    trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})}
	t.r.mu.Lock()
	t.r.spans = append(t.r.spans, s)
	t.r.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Span is a recorded span.
type Span struct {
	embedded.Span
	rec    *Recorder
	name   string
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	attrs  []attribute.KeyValue
	links  []trace.Link
	status Status
	ended  bool
}

// Name returns the span's name.
func (s *Span) Name() string { s.rec.mu.Lock(); defer s.rec.mu.Unlock(); return s.name }

// Parent returns the parent's span context (invalid for a root).
func (s *Span) Parent() trace.SpanContext { return s.parent }

// Kind returns the span's kind.
func (s *Span) Kind() trace.SpanKind { return s.kind }

// Attributes returns the span's attributes.
func (s *Span) Attributes() []attribute.KeyValue {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	return append([]attribute.KeyValue(nil), s.attrs...)
}

// Attr returns the value of the attribute key as a string ("" if unset).
func (s *Span) Attr(key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// Links returns the span's links.
func (s *Span) Links() []trace.Link {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	return append([]trace.Link(nil), s.links...)
}

// Status returns the span's status.
func (s *Span) Status() Status { s.rec.mu.Lock(); defer s.rec.mu.Unlock(); return s.status }

// End implements trace.Span.
func (s *Span) End(...trace.SpanEndOption) { s.rec.mu.Lock(); s.ended = true; s.rec.mu.Unlock() }

// AddEvent implements trace.Span (events are not kept).
func (s *Span) AddEvent(string, ...trace.EventOption) {}

// AddLink implements trace.Span.
func (s *Span) AddLink(l trace.Link) {
	s.rec.mu.Lock()
	s.links = append(s.links, l)
	s.rec.mu.Unlock()
}

// IsRecording implements trace.Span.
func (s *Span) IsRecording() bool { return true }

// RecordError implements trace.Span (errors are not kept).
func (s *Span) RecordError(error, ...trace.EventOption) {}

// SpanContext implements trace.Span.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// SetStatus implements trace.Span.
func (s *Span) SetStatus(c codes.Code, d string) {
	s.rec.mu.Lock()
	s.status = Status{Code: c, Description: d}
	s.rec.mu.Unlock()
}

// SetName implements trace.Span.
func (s *Span) SetName(n string) { s.rec.mu.Lock(); s.name = n; s.rec.mu.Unlock() }

// SetAttributes implements trace.Span.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.rec.mu.Lock()
	s.attrs = append(s.attrs, kv...)
	s.rec.mu.Unlock()
}

// TracerProvider implements trace.Span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.rec }

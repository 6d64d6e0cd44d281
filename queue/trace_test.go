package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/tracing/tracingtest"
	"github.com/leasecron/leasecron/leasecrontype"
)

const (
	rowTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpanID  = "00f067aa0ba902b7"
	rowTP      = "00-" + rowTraceID + "-" + rowSpanID + "-01"
)

func recorder() (*tracingtest.Recorder, *tracingtest.Recorder) {
	sr := tracingtest.NewRecorder()
	return sr, sr
}

func spansNamed(sr *tracingtest.Recorder, name string) []*tracingtest.Span {
	var out []*tracingtest.Span
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracingtest.Span, key string) string { return s.Attr(key) }

// A delivery's span is a child of the envelope's traceparent, carries the
// task's id, type, attempt and outcome, and is the span in the handler's
// context; a failed attempt adds a retry span, the last a dead-letter span.
func TestDeliverySpans(t *testing.T) {
	sr, tp := recorder()
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{MaxAttempts: 2, BackoffBase: time.Second, BackoffMax: time.Second, PollMax: 2 * time.Second}, TracerProvider: tp})
	var inHandler trace.SpanContext
	h.c.Handle("ok", func(ctx context.Context, _ leasecrontype.Task) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	})
	h.c.Handle("bad", func(context.Context, leasecrontype.Task) error { return errors.New("boom") })
	h.enqueue(Envelope{ID: "t1", Type: "ok", TraceParent: rowTP})
	h.start()
	h.expect(OutcomeSucceeded)
	runs := spansNamed(sr, "leasecron.run")
	if len(runs) != 1 {
		t.Fatalf("%d run spans", len(runs))
	}
	r := runs[0]
	if r.SpanContext().TraceID().String() != rowTraceID || r.Parent().SpanID().String() != rowSpanID || !r.Parent().IsRemote() {
		t.Fatalf("run span %s parent %s, want a child of %s", r.SpanContext().TraceID(), r.Parent().SpanID(), rowTP)
	}
	if attr(r, "leasecron.task.id") != "t1" || attr(r, "leasecron.task.type") != "ok" || attr(r, "leasecron.task.attempt") != "1" || attr(r, "leasecron.outcome") != "succeeded" {
		t.Fatalf("run span attributes %v", r.Attributes())
	}
	if inHandler.SpanID() != r.SpanContext().SpanID() {
		t.Fatalf("the handler's context holds span %s, want the run span %s", inHandler.SpanID(), r.SpanContext().SpanID())
	}

	h.enqueue(Envelope{ID: "t2", Type: "bad", TraceParent: rowTP})
	h.expect(OutcomeRetried, OutcomeDead)
	retries, deads := spansNamed(sr, "leasecron.retry"), spansNamed(sr, "leasecron.dead_letter")
	if len(retries) != 1 || len(deads) != 1 {
		t.Fatalf("%d retry and %d dead-letter spans, want one each", len(retries), len(deads))
	}
	runs = spansNamed(sr, "leasecron.run")
	if len(runs) != 3 || retries[0].Parent().SpanID() != runs[1].SpanContext().SpanID() || deads[0].Parent().SpanID() != runs[2].SpanContext().SpanID() {
		t.Fatalf("retry/dead-letter spans are not inside their run spans")
	}
	if attr(deads[0], "leasecron.task.attempt") != "2" || attr(runs[2], "leasecron.outcome") != "dead" || runs[2].Status().Description == "" {
		t.Fatalf("dead-letter span %v; last run span %v %v", deads[0].Attributes(), runs[2].Attributes(), runs[2].Status())
	}
}

// An occurrence of a recurring series is its own trace, linked to the
// series' traceparent.
func TestOccurrenceSpanLinksToTheSeries(t *testing.T) {
	sr, tp := recorder()
	h := newHarness(t, ConsumerOptions{TracerProvider: tp})
	h.c.Handle("nightly", func(context.Context, leasecrontype.Task) error { return nil })
	h.enqueue(Envelope{ID: "n@2030-01-02T03:00:00Z", Series: "n", Type: "nightly", TraceParent: rowTP})
	h.start()
	h.expect(OutcomeSucceeded)
	runs := spansNamed(sr, "leasecron.run")
	if len(runs) != 1 {
		t.Fatalf("%d run spans", len(runs))
	}
	r := runs[0]
	if r.Parent().IsValid() || r.SpanContext().TraceID().String() == rowTraceID {
		t.Fatalf("occurrence span is in the series' trace (parent %v)", r.Parent())
	}
	if len(r.Links()) != 1 || r.Links()[0].SpanContext.TraceID().String() != rowTraceID || r.Links()[0].SpanContext.SpanID().String() != rowSpanID {
		t.Fatalf("occurrence span links %v, want the series %s", r.Links(), rowTP)
	}
	if attr(r, "leasecron.task.series") != "n" {
		t.Fatalf("attributes %v", r.Attributes())
	}
}

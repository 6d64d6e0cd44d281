package leasecron

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// tracingEnqueuer is the mover's Enqueuer with a leasecron.move span around
// every enqueue: a child of the schedule row's trace (an occurrence of a
// series is a new trace linked to the series').
type tracingEnqueuer struct {
	next   schedule.Enqueuer
	tracer trace.Tracer
}

func (e tracingEnqueuer) Enqueue(ctx context.Context, env queue.Envelope, delay time.Duration) error {
	ctx, span := tracing.StartTask(ctx, e.tracer, "leasecron.move", env.TraceParent, env.Series != "", trace.SpanKindProducer,
		append(tracing.TaskAttrs(env.ID, env.Type, env.FailedAttempts+1, env.Series), tracing.Generation.Int64(env.Generation))...)
	defer span.End()
	err := e.next.Enqueue(ctx, env, delay)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

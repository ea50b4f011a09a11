package telemetry

import (
	"context"
	"crypto/sha256"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3c is the propagator of trace context in task records and assignments:
// always W3C traceparent/tracestate, whatever OTEL_PROPAGATORS says, since
// agents in any language read it.
var w3c = propagation.TraceContext{}

// Inject returns the W3C trace context of ctx's span as a carrier map, or
// nil when ctx has no valid span context (tracing off).
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := propagation.MapCarrier{}
	w3c.Inject(ctx, m)
	return m
}

// Extract returns ctx with the remote span context carried in m (as written
// by Inject or by any W3C propagator); ctx unchanged when m has none.
func Extract(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier(m))
}

// AttemptSpanContext is the span context of the scheduler's span for one
// execution (task, step, attempt) in the task's trace: its span id is
// derived from the trace id and the execution's name, so that any process
// (the next attempt's scheduler, the supervisor) can link to or parent
// under an attempt span without storing its id. It is invalid when the
// task has no trace.
func AttemptSpanContext(task trace.SpanContext, ns, taskID, step string, attempt int32) trace.SpanContext {
	if !task.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    task.TraceID(),
		SpanID:     attemptSpanID(task.TraceID(), ns, taskID, step, attempt),
		TraceFlags: task.TraceFlags(),
		TraceState: task.TraceState(),
		Remote:     true,
	})
}

func attemptSpanID(tid trace.TraceID, ns, taskID, step string, attempt int32) trace.SpanID {
	h := sha256.New()
	h.Write(tid[:])
	for _, s := range []string{ns, taskID, step} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write([]byte{byte(attempt >> 24), byte(attempt >> 16), byte(attempt >> 8), byte(attempt)})
	var id trace.SpanID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// WithSpanID asks the ID generator installed by Setup (or IDGenerator) to
// give the next span started with ctx the span id id. Reeve uses it for
// attempt spans, whose ids are derived (AttemptSpanContext).
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, id)
}

type spanIDKey struct{}

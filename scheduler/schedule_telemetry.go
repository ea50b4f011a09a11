package scheduler

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/reeve-org/reeve/internal/telemetry"
)

// The schedule's attributes on its spans and metrics.
const (
	keySchedule = attribute.Key("reeve.schedule.name")
	keyOrigin   = attribute.Key("reeve.schedule.origin")
	keyReason   = attribute.Key("reeve.schedule.skip_reason")
)

// scheduleInstruments are the metrics and spans of schedules
// (docs/observability.md): tasks started, times skipped, and how late a
// scheduled time started.
type scheduleInstruments struct {
	tracer  trace.Tracer
	fired   metric.Int64Counter
	skipped metric.Int64Counter
	late    metric.Float64Histogram
	sets    attrSets // memoized: 10,000 schedules may start at the same second
}

func newScheduleInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *scheduleInstruments {
	m := mp.Meter(telemetry.ScopeName + "/scheduler")
	in := &scheduleInstruments{tracer: tp.Tracer(telemetry.ScopeName + "/scheduler")}
	in.fired, _ = m.Int64Counter("reeve.schedules.fired",
		metric.WithDescription("Tasks started by schedules (new tasks only: a time submitted again is not counted), by namespace and origin (scheduled, catch-up, buffered, trigger, backfill)"))
	in.skipped, _ = m.Int64Counter("reeve.schedules.skipped",
		metric.WithDescription("Nominal times of schedules that did not run, by namespace and reason (overlap, buffer full, missed: older than the catch-up window, paused)"))
	in.late, _ = m.Float64Histogram("reeve.schedules.lateness", metric.WithUnit("s"),
		metric.WithDescription("How long after its firing time (nominal time plus jitter) a scheduled time's task was started"),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))
	return in
}

// startFire starts the span of one firing of a schedule.
func (in *scheduleInstruments) startFire(ctx context.Context, ns, name string) (context.Context, trace.Span) {
	return in.tracer.Start(ctx, "schedule.fire", trace.WithAttributes(telemetry.KeyNamespace.String(ns), keySchedule.String(name)))
}

// endFire ends it with what the firing did.
func endFire(span trace.Span, started, skipped, buffered int32, err error) {
	span.SetAttributes(attribute.Int("reeve.schedule.started", int(started)), attribute.Int("reeve.schedule.skipped", int(skipped)),
		attribute.Int("reeve.schedule.buffered", int(buffered)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startedOne counts a task a schedule started, and for a scheduled or
// caught-up time how late after its firing time; a late below 0 is a time
// fired ahead, whose lateness scheduledStart records when it starts.
func (in *scheduleInstruments) startedOne(ctx context.Context, ns, origin string, late time.Duration) {
	in.fired.Add(ctx, 1, in.sets.get([5]string{"schedules.fired", ns, origin}, func() []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), keyOrigin.String(origin)}
	}))
	if (origin == "scheduled" || origin == "catch-up") && late >= 0 {
		in.scheduledStart(ctx, ns, late)
	}
}

// scheduledStart records the lateness of a time fired ahead: how long after
// its start time (the firing time) its task started.
func (in *scheduleInstruments) scheduledStart(ctx context.Context, ns string, late time.Duration) {
	in.late.Record(ctx, max(late, 0).Seconds(), in.sets.get([5]string{"schedules.lateness", ns}, func() []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.KeyNamespace.String(ns)}
	}))
}

func (in *scheduleInstruments) skippedSome(ctx context.Context, ns, reason string, n int) {
	in.skipped.Add(ctx, int64(n), metric.WithAttributes(telemetry.KeyNamespace.String(ns), keyReason.String(reason)))
}

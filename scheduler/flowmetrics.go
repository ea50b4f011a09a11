package scheduler

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"

	"github.com/reeve-org/reeve/internal/telemetry"
)

// registerFlowMetrics reports flow control per (namespace, step type) with
// settings, from this scheduler's view (docs/observability.md): every
// scheduler watches the same keys, so aggregate the gauges with max and
// sum the throttled counter.
func registerFlowMetrics(m metric.Meter, s *Server, in *instruments) {
	in.slotIdle, _ = m.Float64Histogram("reeve.queue.slot_idle", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
		metric.WithDescription("How long a freed max_running slot stayed free while steps of its type waited: from this scheduler seeing the slot freed to its dispatcher taking a slot for the next claim"))
	running, _ := m.Int64ObservableGauge("reeve.queue.running",
		metric.WithDescription("Attempts holding a max_running slot of the step type, cluster-wide (aggregate with max)"))
	limit, _ := m.Int64ObservableGauge("reeve.queue.limit",
		metric.WithDescription("The step type's max_running; 0: none"))
	limited, _ := m.Int64ObservableGauge("reeve.queue.limited",
		metric.WithDescription("1 while the step type dispatches nothing because it is paused or at its max_running, else 0"))
	paused, _ := m.Int64ObservableGauge("reeve.queue.paused",
		metric.WithDescription("1 while the step type is paused"))
	throttled, _ := m.Int64ObservableCounter("reeve.queue.throttled",
		metric.WithDescription("Dispatches of the step type this scheduler put off for want of a rate token (sum over schedulers)"))
	_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		d := s.disp
		if d == nil {
			return nil
		}
		d.lock()
		defer d.unlock()
		f := d.flow
		for k, cfg := range f.configs {
			attrs := metric.WithAttributes(telemetry.KeyNamespace.String(k.ns), telemetry.KeyStepType.String(k.typ))
			o.ObserveInt64(limit, int64(cfg.GetMaxRunning()), attrs)
			o.ObserveInt64(running, int64(len(f.held[k])), attrs)
			at := int64(0)
			if m := cfg.GetMaxRunning(); cfg.GetPaused() || (m > 0 && len(f.held[k]) >= int(m)) {
				at = 1
			}
			o.ObserveInt64(limited, at, attrs)
			p := int64(0)
			if cfg.GetPaused() {
				p = 1
			}
			o.ObserveInt64(paused, p, attrs)
		}
		for k, n := range f.throttled {
			o.ObserveInt64(throttled, n, metric.WithAttributes(telemetry.KeyNamespace.String(k.ns), telemetry.KeyStepType.String(k.typ)))
		}
		return nil
	}, running, limit, limited, paused, throttled)
}

// observeSlotIdle records how long a freed slot of k stayed free before a
// claim here took one (reeve.queue.slot_idle).
func (in *instruments) observeSlotIdle(k queueKey, idle time.Duration) {
	if in.slotIdle == nil {
		return
	}
	in.slotIdle.Record(context.Background(), idle.Seconds(),
		metric.WithAttributes(telemetry.KeyNamespace.String(k.ns), telemetry.KeyStepType.String(k.typ)))
}

// flowSpanAttrs are the flow-control attributes of an attempt's span: the
// max_running slot it took and its concurrency key, when it has them. The
// span starts when the attempt was due, so its queue wait (reeve.step.queue_wait_ms)
// includes any wait for a slot, a token or a resumed queue.
func flowSpanAttrs(t *reevev1.Task, st *reevev1.Step) []trace.SpanStartOption {
	var attrs []attribute.KeyValue
	if st.GetSlot() > 0 {
		attrs = append(attrs, attribute.Int("reeve.queue.slot", int(st.GetSlot())), attribute.Int("reeve.queue.max_running", int(st.GetSlotLimit())))
	}
	if st.GetKeySlot() > 0 {
		attrs = append(attrs, attribute.String("reeve.concurrency_key", st.GetConcurrencyKey()))
	}
	if t.GetConcurrencyKey() != "" {
		attrs = append(attrs, attribute.String("reeve.task.concurrency_key", t.GetConcurrencyKey()))
	}
	if len(attrs) == 0 {
		return nil
	}
	return []trace.SpanStartOption{trace.WithAttributes(attrs...)}
}

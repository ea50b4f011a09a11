package supervisor

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// overdueCountCap bounds the keys read per collection for reeve.steps.overdue.
const overdueCountCap = 1000

// instruments are the supervisor's spans and metrics.
type instruments struct {
	tracer     trace.Tracer
	id         string
	recoveries metric.Int64Counter
	pruned     metric.Int64Counter
	timerLate  metric.Float64Histogram // timers.go
}

func newInstruments(s *Supervisor) *instruments {
	m := s.opts.meter.Meter(telemetry.ScopeName + "/supervisor")
	in := &instruments{tracer: s.opts.tracer.Tracer(telemetry.ScopeName + "/supervisor"), id: s.opts.id}
	in.recoveries, _ = m.Int64Counter("reeve.supervisor.recoveries",
		metric.WithDescription("Expired executions recovered by the leading supervisor, by action (retry, compensate, fail)"))
	in.timerLate = newTimerLateness(m) // timers.go
	in.pruned, _ = m.Int64Counter("reeve.supervisor.deadline_keys_pruned",
		metric.WithDescription("Deadline index keys removed because no task record implies them any more (task deleted, ended or moved on)"))
	overdue, _ := m.Float64ObservableGauge("reeve.steps.overdue.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest still-dispatched execution passed its complete-by; 0 when none did (the 'nothing stuck' signal)"))
	overdueN, _ := m.Int64ObservableGauge("reeve.steps.overdue",
		metric.WithDescription(fmt.Sprintf("Executions whose complete-by (or schedule-to-start deadline) passed and that no supervisor recovered yet, counted up to %d", overdueCountCap)))
	leader, _ := m.Int64ObservableGauge("reeve.supervisor.leader",
		metric.WithDescription("1 while this supervisor leads (acts on expired steps), else 0; the sum over supervisors should be 1"))
	_, _ = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if s.Leading() {
			o.ObserveInt64(leader, 1)
		} else {
			o.ObserveInt64(leader, 0)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		now := s.opts.clock.Now()
		// A keys-only range of the deadline index bounded by now: it costs
		// what is overdue (at most overdueCountCap keys), not what is running.
		expired, err := s.store.ExpiredDeadlines(cctx, now, overdueCountCap)
		if err != nil {
			return nil // etcd unavailable: no sample rather than a wrong one
		}
		age := 0.0
		if len(expired) > 0 {
			age = now.Sub(expired[0].CompleteBy).Seconds()
		}
		n := len(expired)
		// An attempt holding a max_running slot has its complete-by in the
		// slot key, not in deadlines/ (slots.go): the leader's view, which
		// costs nothing, or on another supervisor a read of slots/, which
		// costs what runs of limited types (at most the sum of their
		// limits), not what is overdue.
		slots, err := s.expiredSlots(cctx, now)
		if err != nil {
			return nil
		}
		if len(slots) > 0 {
			age = max(age, now.Sub(slots[0].CompleteBy).Seconds())
		}
		n = min(n+len(slots), overdueCountCap)
		o.ObserveFloat64(overdue, age)
		o.ObserveInt64(overdueN, int64(n))
		return nil
	}, overdue, overdueN, leader)
	return in
}

// startDecision starts the span of a recovery decision in the task's trace,
// linked to the span of the expired attempt.
func (in *instruments) startDecision(ctx context.Context, rec *storev1.TaskRecord, st *reevev1.Step, d store.Deadline,
	action taskstate.Action, delay time.Duration) (context.Context, trace.Span) {
	t := rec.GetTask()
	task := trace.SpanContextFromContext(telemetry.Extract(context.Background(), rec.GetTraceContext()))
	attrs := []attribute.KeyValue{
		telemetry.KeyNamespace.String(d.Namespace), telemetry.KeyTaskID.String(d.TaskID),
		telemetry.KeyWorkflow.String(t.GetWorkflow().GetName()),
		telemetry.KeyStep.String(d.Step), telemetry.KeyStepType.String(taskstate.ExecutionType(t, st)),
		telemetry.KeyAttempt.Int(int(d.Attempt)), telemetry.KeyCompensation.Bool(taskstate.Compensating(st)),
		telemetry.KeyAction.String(action.String()), telemetry.KeySupervisorID.String(in.id),
		telemetry.KeyAgentID.String(st.GetLockedByAgent()),
	}
	if action == taskstate.ActionRetry {
		attrs = append(attrs, telemetry.KeyDelay.Int64(delay.Milliseconds()))
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...)}
	if task.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, task)
		expired := telemetry.AttemptSpanContext(task, d.Namespace, d.TaskID, d.Step, d.Attempt)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: expired, Attributes: []attribute.KeyValue{attribute.String("reeve.link", "expired_attempt")}}))
	}
	ctx, span := in.tracer.Start(ctx, telemetry.SpanDecision, opts...)
	span.AddEvent("complete_by passed", trace.WithTimestamp(d.CompleteBy))
	return ctx, span
}

func endDecision(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

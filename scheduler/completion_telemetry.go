package scheduler

import (
	"context"
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

// SpanWait is a step's wait for a completion from outside (WAITING, or
// deferred by its agent), from its start to its completion; a child of the
// task's trace.
const SpanWait = "reeve.step.wait"

// waitInstruments count the waits for a completion from outside
// (docs/observability.md).
type waitInstruments struct {
	// started: steps that began to wait, by namespace and kind (external:
	// wait_for; deferred: an agent handed it off).
	started metric.Int64Counter
	// completed: completions from outside recorded, by namespace, outcome
	// (succeeded, failed) and by (token, name).
	completed metric.Int64Counter
}

func newWaitInstruments(m metric.Meter, in *instruments, st *store.Store) *waitInstruments {
	w := &waitInstruments{}
	waiting, _ := m.Int64ObservableGauge("reeve.steps.waiting",
		metric.WithDescription("Steps waiting for a completion from outside (WAITING for an external completion, or deferred by their agent), by namespace, counted in etcd's waiting index at collection time (every scheduler reports the same value: aggregate with max)"))
	_, _ = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, ns := range in.knownNamespaces() {
			if n, err := st.CountWaiting(cctx, ns); err == nil {
				o.ObserveInt64(waiting, n, metric.WithAttributes(telemetry.KeyNamespace.String(ns)))
			}
		}
		return nil
	}, waiting)
	w.started, _ = m.Int64Counter("reeve.steps.waits",
		metric.WithDescription("Steps that began to wait for a completion from outside, by namespace and kind: external (wait_for) or deferred (handed off by its agent)"))
	w.completed, _ = m.Int64Counter("reeve.steps.completed_from_outside",
		metric.WithDescription("Completions from outside (CompleteStep) recorded, by namespace, outcome (succeeded, failed) and by (token, name); repeats not counted"))
	return w
}

// waitsStarted counts the steps a write made wait.
func (in *instruments) waitsStarted(before, after *reevev1.Task) {
	if after == nil || in.waits == nil {
		return
	}
	for _, s := range after.GetSteps() {
		kind := ""
		switch {
		case taskstate.Waiting(s) && taskstate.WaitsExternal(after, s):
			kind = "external"
		case s.GetDeferred():
			kind = "deferred"
		default:
			continue
		}
		if b := taskstate.FindStep(before, s.GetName()); b != nil && b.GetAttempt() == s.GetAttempt() && b.GetState() == s.GetState() && b.GetDeferred() == s.GetDeferred() {
			continue // it already waited
		}
		ns := after.GetNamespace()
		in.waits.started.Add(context.Background(), 1, in.attrs.get([5]string{"waits", ns, kind}, func() []attribute.KeyValue {
			return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), attribute.String("reeve.wait.kind", kind)}
		}))
	}
}

// completedOutside counts a completion from outside and records the span of
// the wait it ended (from its start, before, to now).
func (in *instruments) completedOutside(before, after *storev1.TaskRecord, step string, byToken bool, now time.Time) {
	bt, at := before.GetTask(), after.GetTask()
	bst, st := taskstate.FindStep(bt, step), taskstate.FindStep(at, step)
	ns := at.GetNamespace()
	outcome := "succeeded"
	if st.GetCompletionState() == reevev1.StepState_STEP_STATE_FAILED {
		outcome = "failed"
	}
	by := "name"
	if byToken {
		by = "token"
	}
	if in.waits != nil {
		in.waits.completed.Add(context.Background(), 1, in.attrs.get([5]string{"completed_outside", ns, outcome, by}, func() []attribute.KeyValue {
			return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), telemetry.KeyOutcome.String(outcome), attribute.String("reeve.completion.by", by)}
		}))
	}
	in.ended1(bt, at)
	task := trace.SpanContextFromContext(taskContext(after))
	start := bst.GetWaitStartTime()
	if !task.IsValid() || start == nil {
		return
	}
	_, span := in.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), task), SpanWait,
		trace.WithTimestamp(start.AsTime()), trace.WithAttributes(stepAttrs(bt, bst)...),
		trace.WithAttributes(telemetry.KeyOutcome.String(outcome), attribute.String("reeve.completion.by", by),
			attribute.Bool("reeve.wait.deferred", bst.GetDeferred()), telemetry.KeyTaskState.String(at.GetState().String())))
	if e := st.GetLastError(); outcome == "failed" && e != nil {
		span.SetAttributes(telemetry.KeyErrorCode.String(e.GetCode()))
		span.SetStatus(codes.Error, e.GetMessage())
	}
	span.End(trace.WithTimestamp(now))
}

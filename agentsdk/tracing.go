package agentsdk

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// startSpan starts the execution span of an assignment, a child of the
// scheduler's attempt span carried in its trace context.
func (a *Agent) startSpan(ctx context.Context, as *reevev1.StepAssignment) (context.Context, trace.Span) {
	ref := as.GetRef()
	ctx = telemetry.Extract(ctx, as.GetTraceContext())
	return a.opts.tracer.Tracer(telemetry.ScopeName+"/agentsdk").Start(ctx, telemetry.SpanExecute,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			telemetry.KeyNamespace.String(ref.GetNamespace()), telemetry.KeyTaskID.String(ref.GetTaskId()),
			telemetry.KeyStep.String(ref.GetStep()), telemetry.KeyStepType.String(as.GetType()),
			telemetry.KeyAttempt.Int(int(ref.GetAttempt())), telemetry.KeyCompensation.Bool(as.GetCompensation()),
			telemetry.KeyAgentID.String(a.opts.agentID)))
}

// endSpan ends an execution span with the handler's outcome.
func endSpan(span trace.Span, err error) {
	if err != nil {
		var code string
		var e *Error
		if errors.As(err, &e) {
			code = e.Code
		}
		span.SetAttributes(telemetry.KeyOutcome.String("failed"), telemetry.KeyErrorCode.String(code))
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(telemetry.KeyOutcome.String("succeeded"))
	}
	span.End()
}

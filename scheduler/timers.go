package scheduler

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Durable timers (issue 35; taskstate/timers.go): the supervisor's fenced
// decisions for the timer keys of the deadline index. A sleeping step's
// expiry is its success (Wake); a task-level key names no step but a mark:
// @start (StartTask) or @deadline (ExpireTask). Each is one task write
// through recoverTask, compared against the supervisor's fence like any
// recovery.

// validateTimerDecision checks a decision for a task-level key (its step is
// a taskstate mark): attempt 0; @start with RETRY (start now), @deadline
// with COMPENSATE or FAIL; no delay, no agent. It returns the namespace.
func validateTimerDecision(d *reevev1.RecoveryDecision) (string, error) {
	ns, err := validateRecovery(d.GetNamespace(), d.GetTaskId(), "", 0, d.GetReason(), false, false)
	if err != nil {
		return "", err
	}
	if d.GetAttempt() != 0 {
		return "", &workflow.FieldError{Field: "attempt", Reason: fmt.Sprintf("must be 0 for the task-level key %s", d.GetStep())}
	}
	switch a := d.GetAction(); {
	case d.GetStep() == taskstate.StartMark && a != reevev1.RecoveryAction_RECOVERY_ACTION_RETRY:
		return "", &workflow.FieldError{Field: "action", Reason: fmt.Sprintf("a task's start (%s) takes RETRY, got %v", taskstate.StartMark, a)}
	case d.GetStep() == taskstate.DeadlineMark && a != reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE && a != reevev1.RecoveryAction_RECOVERY_ACTION_FAIL:
		return "", &workflow.FieldError{Field: "action", Reason: fmt.Sprintf("a task's deadline (%s) takes COMPENSATE or FAIL, got %v", taskstate.DeadlineMark, a)}
	}
	if d.GetDelay() != nil {
		return "", &workflow.FieldError{Field: "delay", Reason: "a timer decision takes no delay"}
	}
	if d.GetAgentId() != "" {
		return "", &workflow.FieldError{Field: "agent_id", Reason: "only an AGENT_LOST decision names an agent"}
	}
	return ns, nil
}

// timerRecovery applies decision d when its key is a timer: a task-level
// mark, or a sleeping step (whatever action the decision names: a sleep
// that passed its time succeeds). ok is false for any other execution.
// A start or a wake may make steps ready: the first goes straight to an
// agent here with room (claim.go).
func timerRecovery(t *reevev1.Task, step string, attempt int32, d *reevev1.RecoveryDecision, actor string, now time.Time, claim *writeClaim) (action string, ok bool, err error) {
	switch step {
	case taskstate.StartMark:
		return taskstate.ActionStart.String(), true, claim.run(t, "", now, func() error {
			return taskstate.StartTask(t, actor, now)
		})
	case taskstate.DeadlineMark:
		a := taskstate.ActionFail
		if d.GetAction() == reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE {
			a = taskstate.ActionCompensate
		}
		return "task_timeout_" + a.String(), true, claim.without(func() error {
			return taskstate.ExpireTask(t, a, d.GetReason(), actor, now)
		})
	}
	if s := taskstate.FindStep(t, step); s == nil || !taskstate.Sleeping(t, s) {
		return "", false, nil
	}
	return taskstate.ActionWake.String(), true, claim.run(t, "", now, func() error {
		return taskstate.Wake(t, step, attempt, actor, now)
	})
}

// SpanSleep is a sleep step's wait, from when it became ready to its wake,
// in the task's trace (recorded once the wake is written).
const SpanSleep = "reeve.step.sleep"

// timerWritten records what a committed timer decision did: a wake's
// sleep as a span in the task's trace; the start of a schedule's task
// fired ahead, in the schedules' lateness.
func (e *engine) timerWritten(ctx context.Context, action string, rec *storev1.TaskRecord, step string) {
	t := rec.GetTask()
	if action == taskstate.ActionStart.String() && e.scheduledStart != nil {
		if _, _, err := schedule.ParseTaskID(t.GetId()); err == nil && t.GetStartTime() != nil {
			e.scheduledStart(ctx, t.GetNamespace(), e.clock.Now().Sub(t.GetStartTime().AsTime()))
		}
	}
	if action != taskstate.ActionWake.String() {
		return
	}
	st := taskstate.FindStep(t, step)
	ctx = taskContext(rec)
	if st == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	_, span := e.tel.tracer.Start(ctx, SpanSleep, trace.WithTimestamp(st.GetReadyTime().AsTime()),
		trace.WithAttributes(stepAttrs(t, st)...),
		trace.WithAttributes(attribute.String("reeve.sleep", taskstate.Spec(t, step).GetSleep().AsDuration().String())))
	span.End(trace.WithTimestamp(st.GetEndTime().AsTime()))
}

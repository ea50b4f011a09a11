package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

// One path for every recovery. The supervisor's decisions (RecoverSteps,
// and the fenced form of RetryStep, CompensateTask and FailTask, which is
// one such decision: recover_steps.go), this scheduler's own recovery of a
// dropped agent's executions (heartbeats.go) and an operator's actions (the
// unfenced RetryStep, CompensateTask and FailTask) are validated by
// validateRecovery and written by recoverTask.

// validateRecovery checks the fields every recovery has and returns the
// task's namespace. A fenced recovery (the supervisor's, of an expired
// attempt) names the step and the attempt; an operator's names the step when
// stepRequired (a retry) and may name an attempt.
func validateRecovery(ns, taskID, step string, attempt int32, reason string, fenced, stepRequired bool) (string, error) {
	ns, err := taskKey(ns, taskID)
	if err != nil {
		return "", err
	}
	if stepRequired || fenced || step != "" {
		if err := workflow.ValidateName("step", step); err != nil {
			return "", err
		}
	}
	if fenced && attempt < 1 {
		return "", &workflow.FieldError{Field: "attempt", Reason: "required: the expired attempt, at least 1"}
	}
	if attempt < 0 {
		return "", &workflow.FieldError{Field: "attempt", Reason: "must not be negative"}
	}
	if len(reason) > workflow.MaxReasonBytes {
		return "", &workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)}
	}
	return ns, nil
}

// fence turns a supervisor's fence into the compare that must hold in the
// transaction: its election key still exists with the revision it won at.
func (svc *supervisorService) fence(f *reevev1.Fence) (actor string, fences []clientv3.Cmp, err error) {
	if f == nil {
		return "operator", nil, nil
	}
	if !strings.HasPrefix(f.GetElectionKey(), svc.store.ElectionPrefix()+"/") {
		return "", nil, &workflow.FieldError{Field: "fence.election_key", Reason: fmt.Sprintf("not a key of the supervisor election %q", svc.store.ElectionPrefix())}
	}
	if f.GetRevision() < 1 {
		return "", nil, &workflow.FieldError{Field: "fence.revision", Reason: "must be positive"}
	}
	if err := workflow.ValidateAgentID("fence.supervisor_id", f.GetSupervisorId()); err != nil {
		return "", nil, err
	}
	return "supervisor/" + f.GetSupervisorId(), []clientv3.Cmp{store.FenceCmp(f.GetElectionKey(), f.GetRevision())}, nil
}

// recoverFunc applies a recovery to the fresh record of its write and
// returns the action's name (for the span and the log). claim may claim a
// RETRY's next attempt due at once for an agent here (claim.go).
type recoverFunc func(t *reevev1.Task, now time.Time, claim *writeClaim) (action string, err error)

// recoverTask recovers the execution ref in one task write, compared
// against fences: apply changes the fresh record. The engine then counts the
// task's end, tells the holders of revoked executions to stop and hands an
// attempt claimed in the write to its agent. traceCtx is the parent span's
// context, if any (else the caller's). It returns the task as written.
func (e *engine) recoverTask(ctx context.Context, ref *reevev1.StepRef, traceCtx map[string]string, actor string,
	fences []clientv3.Cmp, apply recoverFunc) (_ *reevev1.Task, err error) {
	ns, id, step, attempt := ref.GetNamespace(), ref.GetTaskId(), ref.GetStep(), ref.GetAttempt()
	if sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), traceCtx)); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := e.tel.tracer.Start(ctx, telemetry.SpanRecoveryApply, trace.WithAttributes(
		telemetry.KeyNamespace.String(ns), telemetry.KeyTaskID.String(id), telemetry.KeyStep.String(step),
		telemetry.KeyAttempt.Int(int(attempt))))
	w, err := e.update(ctx, taskWrite{ns: ns, id: id, fences: fences, claim: "direct dispatch of a retry",
		change: func(t *reevev1.Task, now time.Time, claim *writeClaim) (effects, error) {
			action, err := apply(t, now, claim)
			return effects{action: action, revoke: "step recovered by " + actor}, err
		}})
	defer func() {
		span.SetAttributes(telemetry.KeyAction.String(w.action))
		if done := (*alreadyApplied)(nil); err != nil && !errors.As(err, &done) {
			span.SetStatus(otelcodes.Error, toStatus(err).Message())
		}
		span.End()
	}()
	if store.IsNotFound(err) {
		err = e.notInEtcd(ctx, ns, id, err)
	}
	if err != nil {
		return nil, err
	}
	e.log.InfoContext(ctx, "recovery applied", "task_id", id, "step", step, "attempt", attempt,
		"actor", actor, "action", w.action, "task_state", w.after.GetTask().GetState())
	e.timerWritten(ctx, w.action, w.after, step) // timers.go
	return w.after.GetTask(), nil
}

// recoveryRequest is what the three single-action recovery RPCs have in
// common.
type recoveryRequest interface {
	GetNamespace() string
	GetTaskId() string
	GetStep() string
	GetAttempt() int32
	GetFence() *reevev1.Fence
	GetReason() string
	GetRequestId() string
}

// recover serves a single-action recovery RPC. With a fence it is the
// supervisor's decision for an expired attempt: one RecoverSteps decision
// (action, delay), validated and applied as RecoverSteps does. Without, it
// is an operator's action on the task as it is (operator; stepRequired: the
// request must name a step), recorded with the caller's identity when
// authorization is on.
func (svc *supervisorService) recover(ctx context.Context, req recoveryRequest, action reevev1.RecoveryAction, delay *durationpb.Duration, stepRequired bool,
	operator func(t *reevev1.Task, actor string, now time.Time) error) (*reevev1.Task, error) {
	fenced := req.GetFence() != nil
	var d *reevev1.RecoveryDecision
	var ns string
	var err error
	if fenced {
		d = &reevev1.RecoveryDecision{Namespace: req.GetNamespace(), TaskId: req.GetTaskId(), Step: req.GetStep(),
			Attempt: req.GetAttempt(), Action: action, Reason: req.GetReason()}
		d.Delay = delay
		ns, err = validateDecision(d)
	} else {
		ns, err = validateRecovery(req.GetNamespace(), req.GetTaskId(), req.GetStep(), req.GetAttempt(), req.GetReason(), false, stepRequired)
		if rid := req.GetRequestId(); err == nil && rid != "" {
			err = workflow.ValidateTaskID("request_id", rid)
		}
	}
	if err != nil {
		return nil, err
	}
	actor, fences, err := svc.fence(req.GetFence())
	if err != nil {
		return nil, err
	}
	ref := &reevev1.StepRef{Namespace: ns, TaskId: req.GetTaskId(), Step: req.GetStep(), Attempt: req.GetAttempt()}
	if fenced {
		return svc.eng.recoverTask(ctx, ref, nil, actor, fences, decided(ref, actor, func(*reevev1.Task, time.Time) (*reevev1.RecoveryDecision, error) {
			return d, nil
		}))
	}
	actor = actorOf(ctx, actor)
	t, err := svc.eng.recoverTask(ctx, ref, nil, actor, nil, func(t *reevev1.Task, now time.Time, claim *writeClaim) (string, error) {
		return "operator", claim.without(func() error {
			return operatorOnce(t, req.GetRequestId(), func() error { return operator(t, actor, now) })
		})
	})
	var done *alreadyApplied
	if errors.As(err, &done) {
		return done.task, nil
	}
	return t, err
}

// alreadyApplied is the refusal of an operator action whose request_id
// the task's history already records: the caller answers with the task.
type alreadyApplied struct{ task *reevev1.Task }

func (e *alreadyApplied) Error() string { return "request already applied" }

// operatorOnce runs an operator's action on t unless requestID (when not
// empty) is on an event of t's history, and marks the events the action
// adds with requestID: a retry of the call after a lost answer returns the
// task (AIP-155) while the event is in the kept history.
func operatorOnce(t *reevev1.Task, requestID string, act func() error) error {
	if requestID == "" {
		return act()
	}
	had := make(map[*reevev1.HistoryEvent]bool, len(t.GetHistory()))
	for _, e := range t.GetHistory() {
		if e.GetRequestId() == requestID {
			return &alreadyApplied{task: proto.Clone(t).(*reevev1.Task)}
		}
		had[e] = true
	}
	if err := act(); err != nil {
		return err
	}
	for _, e := range t.GetHistory() {
		if !had[e] {
			e.RequestId = requestID
		}
	}
	return nil
}

// RetryStep implements SupervisorService.
func (svc *supervisorService) RetryStep(ctx context.Context, req *reevev1.RetryStepRequest) (*reevev1.RetryStepResponse, error) {
	delay := req.GetDelay().AsDuration()
	if err := req.GetDelay().CheckValid(); req.GetDelay() != nil && (err != nil || delay < 0 || delay > workflow.MaxTimeout) {
		return nil, statusErr(&workflow.FieldError{Field: "delay", Reason: fmt.Sprintf("must be within [0, %v]", workflow.MaxTimeout)})
	}
	t, err := svc.recover(ctx, req, reevev1.RecoveryAction_RECOVERY_ACTION_RETRY, req.GetDelay(), true, func(t *reevev1.Task, actor string, now time.Time) error {
		return taskstate.RetryFailed(t, req.GetStep(), req.GetAttempt(), req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.RetryStepResponse{Task: t}, nil
}

// CompensateTask implements SupervisorService.
func (svc *supervisorService) CompensateTask(ctx context.Context, req *reevev1.CompensateTaskRequest) (*reevev1.CompensateTaskResponse, error) {
	t, err := svc.recover(ctx, req, reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE, nil, false, func(t *reevev1.Task, actor string, now time.Time) error {
		return taskstate.Compensate(t, req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.CompensateTaskResponse{Task: t}, nil
}

// FailTask implements SupervisorService.
func (svc *supervisorService) FailTask(ctx context.Context, req *reevev1.FailTaskRequest) (*reevev1.FailTaskResponse, error) {
	t, err := svc.recover(ctx, req, reevev1.RecoveryAction_RECOVERY_ACTION_FAIL, nil, false, func(t *reevev1.Task, actor string, now time.Time) error {
		return taskstate.FailTask(t, req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.FailTaskResponse{Task: t}, nil
}

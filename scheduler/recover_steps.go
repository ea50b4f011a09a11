package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// MaxRecoveryDecisions bounds the decisions of one RecoverSteps request.
const MaxRecoveryDecisions = 1000

// RecoverSteps implements SupervisorService: many fenced recovery decisions
// in one call. The fence is checked once for form and compared in every
// decision's transaction; each decision is an UpdateTask of its own, so the
// store's group commit puts many of them in one etcd transaction, and one
// decision's refusal does not affect the others.
func (svc *supervisorService) RecoverSteps(ctx context.Context, req *reevev1.RecoverStepsRequest) (*reevev1.RecoverStepsResponse, error) {
	if req.GetFence() == nil {
		return nil, statusErr(&workflow.FieldError{Field: "fence", Reason: "required: RecoverSteps is for the supervisor leader"})
	}
	if n := len(req.GetDecisions()); n > MaxRecoveryDecisions {
		return nil, statusErr(&workflow.FieldError{Field: "decisions", Reason: fmt.Sprintf("%d decisions, at most %d per request", n, MaxRecoveryDecisions)})
	}
	actor, fences, err := svc.fence(req.GetFence())
	if err != nil {
		return nil, statusErr(err)
	}
	out := make([]*reevev1.RecoveryOutcome, len(req.GetDecisions()))
	var wg sync.WaitGroup
	for i, d := range req.GetDecisions() {
		ns, err := validateDecision(d)
		if err != nil {
			var fe *workflow.FieldError
			if errors.As(err, &fe) {
				err = &workflow.FieldError{Field: fmt.Sprintf("decisions[%d].%s", i, fe.Field), Reason: fe.Reason}
			}
			out[i] = &reevev1.RecoveryOutcome{Status: withRequest(toStatus(err), d).Proto()}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = svc.applyDecision(ctx, ns, d, actor, fences)
		}()
	}
	wg.Wait()
	return &reevev1.RecoverStepsResponse{Outcomes: out}, nil
}

// validateDecision checks one decision's fields and returns its namespace.
func validateDecision(d *reevev1.RecoveryDecision) (string, error) {
	if taskstate.TaskMark(d.GetStep()) {
		return validateTimerDecision(d) // timers.go
	}
	ns, err := validateRecovery(d.GetNamespace(), d.GetTaskId(), d.GetStep(), d.GetAttempt(), d.GetReason(), true, true)
	if err != nil {
		return "", err
	}
	switch d.GetAction() {
	case reevev1.RecoveryAction_RECOVERY_ACTION_RETRY:
		if dl := d.GetDelay(); dl != nil && (dl.CheckValid() != nil || dl.AsDuration() < 0 || dl.AsDuration() > workflow.MaxTimeout) {
			return "", &workflow.FieldError{Field: "delay", Reason: fmt.Sprintf("must be within [0, %v]", workflow.MaxTimeout)}
		}
	case reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE, reevev1.RecoveryAction_RECOVERY_ACTION_FAIL,
		reevev1.RecoveryAction_RECOVERY_ACTION_AGENT_LOST:
		if d.GetDelay() != nil {
			return "", &workflow.FieldError{Field: "delay", Reason: "only a RETRY decision takes a delay"}
		}
	default:
		return "", &workflow.FieldError{Field: "action", Reason: fmt.Sprintf("must be RETRY, COMPENSATE, FAIL or AGENT_LOST, got %v", d.GetAction())}
	}
	if d.GetAction() == reevev1.RecoveryAction_RECOVERY_ACTION_AGENT_LOST {
		if err := workflow.ValidateAgentID("agent_id", d.GetAgentId()); err != nil {
			return "", err
		}
	} else if d.GetAgentId() != "" {
		return "", &workflow.FieldError{Field: "agent_id", Reason: "only an AGENT_LOST decision names an agent"}
	}
	return ns, nil
}

// applyDecision applies one validated decision.
func (svc *supervisorService) applyDecision(ctx context.Context, ns string, d *reevev1.RecoveryDecision, actor string, fences []clientv3.Cmp) *reevev1.RecoveryOutcome {
	ref := &reevev1.StepRef{Namespace: ns, TaskId: d.GetTaskId(), Step: d.GetStep(), Attempt: d.GetAttempt()}
	return svc.eng.applyRecovery(ctx, ref, d.GetTraceContext(), actor, fences, func(*reevev1.Task, time.Time) (*reevev1.RecoveryDecision, error) {
		return d, nil
	})
}

// decideFunc returns, on the fresh record of a recovery's write, the
// decision to apply to it (its action, delay, reason and agent id are
// used), or a refusal.
type decideFunc func(t *reevev1.Task, now time.Time) (*reevev1.RecoveryDecision, error)

// applyRecovery applies the decision decide returns for the execution ref
// (recoverTask) and reports the outcome as RecoverSteps does. The
// supervisor's decisions (applyDecision) and this scheduler's own recovery
// of a dropped agent's heartbeat executions (heartbeats.go) come through
// here.
func (e *engine) applyRecovery(ctx context.Context, ref *reevev1.StepRef, traceCtx map[string]string, actor string,
	fences []clientv3.Cmp, decide decideFunc) *reevev1.RecoveryOutcome {
	t, err := e.recoverTask(ctx, ref, traceCtx, actor, fences, decided(ref, actor, decide))
	if err != nil {
		return &reevev1.RecoveryOutcome{Status: withRequest(toStatus(err), ref).Proto()}
	}
	return &reevev1.RecoveryOutcome{Applied: true, TaskState: t.GetState()}
}

// decided is the write of the decision decide returns for the expired
// execution ref: a RETRY due at once goes straight to an agent here with
// room (claim.go).
func decided(ref *reevev1.StepRef, actor string, decide decideFunc) recoverFunc {
	step, attempt := ref.GetStep(), ref.GetAttempt()
	return func(t *reevev1.Task, now time.Time, claim *writeClaim) (string, error) {
		d, err := decide(t, now)
		if err != nil {
			return "", err
		}
		if name, ok, err := timerRecovery(t, step, attempt, d, actor, now, claim); ok { // timers.go
			return name, err
		}
		action := d.GetAction()
		if action == reevev1.RecoveryAction_RECOVERY_ACTION_RETRY {
			return action.String(), claim.run(t, step, now, func() error {
				return taskstate.RetryExpired(t, step, attempt, d.GetDelay().AsDuration(), actor, now)
			})
		}
		return action.String(), claim.without(func() error {
			switch action {
			case reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE:
				return taskstate.CompensateExpired(t, step, attempt, d.GetReason(), actor, now)
			case reevev1.RecoveryAction_RECOVERY_ACTION_AGENT_LOST:
				grace, ok := workflow.DisconnectGrace(taskstate.Spec(t, step))
				if !ok {
					return fmt.Errorf("step %q declares no heartbeat timeout or reassign_after_disconnect: %w", step, taskstate.ErrStale)
				}
				return taskstate.ShortenOnDisconnect(t, step, attempt, d.GetAgentId(), now.Add(grace), actor, now)
			default:
				return taskstate.FailExpired(t, step, attempt, d.GetReason(), actor, now)
			}
		})
	}
}

package scheduler

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// recoveryRequest is what the three recovery RPCs have in common.
type recoveryRequest interface {
	GetNamespace() string
	GetTaskId() string
	GetStep() string
	GetAttempt() int32
	GetFence() *reevev1.Fence
	GetReason() string
}

// recover validates a recovery request and applies act to the task in one
// transaction, fenced by the supervisor's election when the request carries
// a fence. act gets the actor to record ("supervisor/<id>", or "operator"
// followed by the caller's identity when authorization is on).
func (s *Server) recover(ctx context.Context, req recoveryRequest, stepRequired bool,
	act func(t *reevev1.Task, fenced bool, actor string) error) (*reevev1.Task, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, err
	}
	fenced := req.GetFence() != nil
	if stepRequired || fenced || req.GetStep() != "" {
		if err := workflow.ValidateName("step", req.GetStep()); err != nil {
			return nil, err
		}
	}
	if fenced && req.GetAttempt() < 1 {
		return nil, &workflow.FieldError{Field: "attempt", Reason: "required with a fence: the expired attempt"}
	}
	if req.GetAttempt() < 0 {
		return nil, &workflow.FieldError{Field: "attempt", Reason: "must not be negative"}
	}
	if len(req.GetReason()) > workflow.MaxReasonBytes {
		return nil, &workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)}
	}
	actor, fences, err := s.fence(req.GetFence())
	if err != nil {
		return nil, err
	}
	if !fenced {
		actor = actorOf(ctx, actor)
	}
	before, after, err := s.store.UpdateTask(ctx, ns, req.GetTaskId(), func(t *reevev1.Task) error {
		return act(t, fenced, actor)
	}, fences...)
	if err != nil {
		return nil, err
	}
	s.tel.ended1(before.GetTask(), after.GetTask())
	s.disp.revoke(taskstate.Revoked(before.GetTask(), after.GetTask(), nil), "step recovered by "+actor)
	s.log.InfoContext(ctx, "recovery applied", "task_id", req.GetTaskId(), "step", req.GetStep(), "attempt", req.GetAttempt(), "actor", actor, "task_state", after.GetTask().GetState())
	return after.GetTask(), nil
}

// fence turns a supervisor's fence into the compare that must hold in the
// transaction: its election key still exists with the revision it won at.
func (s *Server) fence(f *reevev1.Fence) (actor string, fences []clientv3.Cmp, err error) {
	if f == nil {
		return "operator", nil, nil
	}
	if !strings.HasPrefix(f.GetElectionKey(), s.store.ElectionPrefix()+"/") {
		return "", nil, &workflow.FieldError{Field: "fence.election_key", Reason: fmt.Sprintf("not a key of the supervisor election %q", s.store.ElectionPrefix())}
	}
	if f.GetRevision() < 1 {
		return "", nil, &workflow.FieldError{Field: "fence.revision", Reason: "must be positive"}
	}
	if err := workflow.ValidateAgentID("fence.supervisor_id", f.GetSupervisorId()); err != nil {
		return "", nil, err
	}
	return "supervisor/" + f.GetSupervisorId(), []clientv3.Cmp{store.FenceCmp(f.GetElectionKey(), f.GetRevision())}, nil
}

// RetryStep implements SupervisorService.
func (s *Server) RetryStep(ctx context.Context, req *reevev1.RetryStepRequest) (*reevev1.RetryStepResponse, error) {
	delay := req.GetDelay().AsDuration()
	if err := req.GetDelay().CheckValid(); req.GetDelay() != nil && (err != nil || delay < 0 || delay > workflow.MaxTimeout) {
		return nil, statusErr(&workflow.FieldError{Field: "delay", Reason: fmt.Sprintf("must be within [0, %v]", workflow.MaxTimeout)})
	}
	t, err := s.recover(ctx, req, true, func(t *reevev1.Task, fenced bool, actor string) error {
		now := s.opts.clock.Now()
		if fenced {
			return taskstate.RetryExpired(t, req.GetStep(), req.GetAttempt(), delay, actor, now)
		}
		return taskstate.RetryFailed(t, req.GetStep(), req.GetAttempt(), req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.RetryStepResponse{Task: t}, nil
}

// CompensateTask implements SupervisorService.
func (s *Server) CompensateTask(ctx context.Context, req *reevev1.CompensateTaskRequest) (*reevev1.CompensateTaskResponse, error) {
	t, err := s.recover(ctx, req, false, func(t *reevev1.Task, fenced bool, actor string) error {
		now := s.opts.clock.Now()
		if fenced {
			return taskstate.CompensateExpired(t, req.GetStep(), req.GetAttempt(), req.GetReason(), actor, now)
		}
		return taskstate.Compensate(t, req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.CompensateTaskResponse{Task: t}, nil
}

// FailTask implements SupervisorService.
func (s *Server) FailTask(ctx context.Context, req *reevev1.FailTaskRequest) (*reevev1.FailTaskResponse, error) {
	t, err := s.recover(ctx, req, false, func(t *reevev1.Task, fenced bool, actor string) error {
		now := s.opts.clock.Now()
		if fenced {
			return taskstate.FailExpired(t, req.GetStep(), req.GetAttempt(), req.GetReason(), actor, now)
		}
		return taskstate.FailTask(t, req.GetReason(), actor, now)
	})
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.FailTaskResponse{Task: t}, nil
}

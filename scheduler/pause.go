package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// PauseTask and ResumeTask: an operator stops a task's dispatch and starts
// it again (taskstate/pause.go says what a paused task does).

// PauseTask implements SupervisorService.
func (svc *supervisorService) PauseTask(ctx context.Context, req *reevev1.PauseTaskRequest) (*reevev1.PauseTaskResponse, error) {
	t, err := svc.pauseOrResume(ctx, req.GetNamespace(), req.GetTaskId(), req.GetReason(), req.GetRequestId(), taskstate.Pause)
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.PauseTaskResponse{Task: t}, nil
}

// ResumeTask implements SupervisorService.
func (svc *supervisorService) ResumeTask(ctx context.Context, req *reevev1.ResumeTaskRequest) (*reevev1.ResumeTaskResponse, error) {
	t, err := svc.pauseOrResume(ctx, req.GetNamespace(), req.GetTaskId(), req.GetReason(), req.GetRequestId(), taskstate.Resume)
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.ResumeTaskResponse{Task: t}, nil
}

// pauseOrResume validates the request and applies act (taskstate.Pause or
// Resume) in one task write. A task already as asked is answered as it is,
// as is a repeat of the same request_id.
func (svc *supervisorService) pauseOrResume(ctx context.Context, ns, id, reason, requestID string,
	act func(t *reevev1.Task, reason, actor string, now time.Time) error) (*reevev1.Task, error) {
	ns, err := taskKey(ns, id)
	if err != nil {
		return nil, err
	}
	if len(reason) > workflow.MaxReasonBytes {
		return nil, &workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)}
	}
	if requestID != "" {
		if err := workflow.ValidateTaskID("request_id", requestID); err != nil {
			return nil, err
		}
	}
	actor := actorOf(ctx, "operator")
	w, err := svc.eng.update(ctx, taskWrite{ns: ns, id: id,
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			return effects{}, operatorOnce(t, requestID, func() error { return act(t, reason, actor, now) })
		}})
	var done *alreadyApplied
	switch {
	case errors.As(err, &done):
		return done.task, nil
	case errors.Is(err, taskstate.ErrNoChange):
		return w.before.GetTask(), nil
	case store.IsNotFound(err):
		return nil, svc.eng.notInEtcd(ctx, ns, id, err)
	case err != nil:
		return nil, err
	}
	svc.log.InfoContext(ctx, "operator action", "task_id", id, "paused", w.after.GetTask().GetPaused(), "actor", actor)
	return w.after.GetTask(), nil
}

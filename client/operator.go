package client

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The operator's actions on a task, as `reeve task retry|compensate|fail`
// take them. Over mutual TLS they need an admin (or supervisor) identity.
// They are not idempotent: a retry after a lost answer may be refused with
// FAILED_PRECONDITION because the first one happened; Task tells.

// RetryStep retries the FAILED step named step with its failure count
// reset; the task resumes. reason ("" for none) is recorded in the task's
// history.
func (r *Run) RetryStep(ctx context.Context, step, reason string) (*reevev1.Task, error) {
	resp, err := r.c.operator.RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: r.namespace, TaskId: r.id, Step: step, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("client: retry step %s of task %s: %w", step, r.id, err)
	}
	return resp.GetTask(), nil
}

// Compensate undoes a running or FAILED task: its succeeded steps are
// compensated in reverse order, and it ends COMPENSATED (or FAILED, if a
// compensation fails for good).
func (r *Run) Compensate(ctx context.Context, reason string) (*reevev1.Task, error) {
	resp, err := r.c.operator.CompensateTask(ctx, &reevev1.CompensateTaskRequest{Namespace: r.namespace, TaskId: r.id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("client: compensate task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Fail ends a task that is not terminal as FAILED, raising an alert, and
// without undoing anything.
func (r *Run) Fail(ctx context.Context, reason string) (*reevev1.Task, error) {
	resp, err := r.c.operator.FailTask(ctx, &reevev1.FailTaskRequest{Namespace: r.namespace, TaskId: r.id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("client: fail task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Pause stops dispatching the task's steps until Resume: running steps go
// on and report, steps that become ready wait, their schedule-to-start
// timers stop. Pausing a paused task changes nothing. Needs the admin role
// of the namespace when authorization is on.
func (r *Run) Pause(ctx context.Context, reason string) (*reevev1.Task, error) {
	resp, err := r.c.operator.PauseTask(ctx, &reevev1.PauseTaskRequest{Namespace: r.namespace, TaskId: r.id, Reason: reason, RequestId: uuid.NewString()})
	if err != nil {
		return nil, fmt.Errorf("client: pause task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Resume dispatches a paused task's ready steps again. Resuming a task that
// is not paused changes nothing.
func (r *Run) Resume(ctx context.Context, reason string) (*reevev1.Task, error) {
	resp, err := r.c.operator.ResumeTask(ctx, &reevev1.ResumeTaskRequest{Namespace: r.namespace, TaskId: r.id, Reason: reason, RequestId: uuid.NewString()})
	if err != nil {
		return nil, fmt.Errorf("client: resume task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Rerun runs the task, FAILED, COMPENSATED or SUCCEEDED, again from step
// from, as a new task linked to this one: the steps that succeeded and were
// not undone, other than from and the steps downstream of it, keep their
// outputs. It returns the new task's Run (the same one when a retry after a
// lost answer repeats the call: its id is chosen here). Needs the admin
// role of the namespace when authorization is on.
func (r *Run) Rerun(ctx context.Context, from, reason string) (*Run, error) {
	id := uuid.NewString()
	resp, err := r.c.scheduler.RerunTask(ctx, &reevev1.RerunTaskRequest{Namespace: r.namespace, TaskId: r.id, FromStep: from, NewTaskId: id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("client: rerun task %s from %s: %w", r.id, from, err)
	}
	return &Run{c: r.c, namespace: r.namespace, id: resp.GetTask().GetId(), created: resp.GetCreated()}, nil
}

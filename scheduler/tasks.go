package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// GetTask implements SchedulerService.
func (svc *schedulerService) GetTask(ctx context.Context, req *reevev1.GetTaskRequest) (*reevev1.GetTaskResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	rec, archived, err := svc.tasks.Get(ctx, ns, req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.GetTaskResponse{Task: svc.disp.withWaitReasons(rec.GetTask()), Archived: archived}, nil
}

// WatchTask implements SchedulerService.
func (svc *schedulerService) WatchTask(req *reevev1.WatchTaskRequest, stream reevev1.SchedulerService_WatchTaskServer) error {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return statusErr(err)
	}
	// A reading goroutine follows etcd and keeps only the newest state not
	// sent yet; this goroutine sends. A client slower than the task's
	// changes gets its latest state instead of every one in between, so a
	// stalled client holds one task here, not every change of it in the
	// etcd client's watch buffer. The terminal state is always sent: it is
	// the last one.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	newest := make(chan *reevev1.Task, 1)
	watchErr := make(chan error, 1)
	go func() {
		defer close(newest)
		put := func(t *reevev1.Task) bool {
			select { // this goroutine alone puts, so after this the put cannot block
			case <-newest:
			default:
			}
			newest <- t
			return taskstate.TerminalTask(t.GetState())
		}
		err := svc.store.WatchTask(ctx, ns, req.GetTaskId(), put)
		if store.IsNotFound(err) {
			// Not in etcd, or it left etcd while watched: an archived
			// task's final state ends the stream.
			var rec *storev1.TaskRecord
			if rec, err = svc.eng.archivedRecord(ctx, ns, req.GetTaskId(), err); err == nil {
				put(rec.GetTask())
			}
		}
		watchErr <- err
	}()
	for t := range newest {
		// Why its queued steps wait, as GetTask says it: as of this send
		// (a change of the reason alone sends nothing).
		if err := stream.Send(&reevev1.WatchTaskResponse{Task: svc.disp.withWaitReasons(t)}); err != nil {
			return err
		}
	}
	if err := <-watchErr; err != nil && stream.Context().Err() == nil {
		return statusErr(err)
	}
	return nil
}

// CancelTask implements SchedulerService.
func (svc *schedulerService) CancelTask(ctx context.Context, req *reevev1.CancelTaskRequest) (*reevev1.CancelTaskResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	if len(req.GetReason()) > workflow.MaxReasonBytes {
		return nil, statusErr(&workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)})
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "canceled by client"
	}
	w, err := svc.eng.update(ctx, taskWrite{ns: ns, id: req.GetTaskId(),
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			return effects{revoke: "task canceled"}, taskstate.Cancel(t, reason, actorOf(ctx, "client"), !req.GetNoCompensate(), now)
		}})
	if errors.Is(err, taskstate.ErrTerminal) || errors.Is(err, taskstate.ErrUndoing) {
		// Ended, or already being undone: the cancel changes nothing.
		return &reevev1.CancelTaskResponse{Task: w.before.GetTask()}, nil
	}
	if store.IsNotFound(err) {
		// An archived task ended: canceling it changes nothing, as for a
		// terminal task in etcd.
		rec, err := svc.eng.archivedRecord(ctx, ns, req.GetTaskId(), err)
		if err != nil {
			return nil, statusErr(err)
		}
		return &reevev1.CancelTaskResponse{Task: rec.GetTask()}, nil
	}
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.CancelTaskResponse{Task: w.after.GetTask()}, nil
}

// taskKey validates a (namespace, task id) pair naming an existing task and
// returns the effective namespace.
func taskKey(ns, id string) (string, error) {
	if err := workflow.ValidateNamespace("namespace", ns); err != nil {
		return "", err
	}
	if id == "" {
		return "", &workflow.FieldError{Field: "task_id", Reason: "required"}
	}
	if err := workflow.ValidateTaskID("task_id", id); err != nil {
		return "", err
	}
	return workflow.Namespace(ns), nil
}

// actorOf is what a task's history records for a caller's action: role, and
// with authorization on, the caller's identity ("client/cert:billing").
func actorOf(ctx context.Context, role string) string {
	if p := auth.FromContext(ctx); p != nil {
		return role + "/" + p.Name
	}
	return role
}

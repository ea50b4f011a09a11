package scheduler

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

// RerunTask implements SchedulerService: it reads the old task (etcd, then
// the archive), builds the new one (taskstate.Rerun) and creates it as a
// submission is created — admitted by the same chain, claimed for an idle
// agent here, idempotent by its id and the request's digest.
func (svc *schedulerService) RerunTask(ctx context.Context, req *reevev1.RerunTaskRequest) (*reevev1.RerunTaskResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateName("from_step", req.GetFromStep()); err != nil {
		return nil, statusErr(err)
	}
	if n := proto.Size(req.GetInput()); n > workflow.MaxInputBytes {
		return nil, statusErr(&workflow.FieldError{Field: "input", Reason: fmt.Sprintf("%d bytes encoded, more than %d", n, workflow.MaxInputBytes)})
	}
	if len(req.GetReason()) > workflow.MaxReasonBytes {
		return nil, statusErr(&workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)})
	}
	req = proto.Clone(req).(*reevev1.RerunTaskRequest)
	req.Namespace = ns
	chosen := req.GetNewTaskId() != ""
	if !chosen {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, statusErr(err)
		}
		req.NewTaskId = id.String()
	} else if err := workflow.ValidateTaskID("new_task_id", req.GetNewTaskId()); err != nil {
		return nil, statusErr(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, statusErr(err)
	}
	digest := digestOf(b)

	old, _, err := svc.tasks.Get(ctx, ns, req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	t, err := taskstate.Rerun(old.GetTask(), req.GetNewTaskId(), req.GetFromStep(), req.GetInput(), req.GetReason(), actorOf(ctx, "operator"), svc.eng.clock.Now())
	if err != nil {
		return nil, statusErr(err)
	}
	// Its concurrency keys from its input (flowkeys.go); the fairness key
	// stays the old task's. A task of a workflow with a key is created
	// waiting and admitted when its key has room (taskkeys.go).
	if err := flowKeys(t, &reevev1.SubmitTaskRequest{FairnessKey: old.GetTask().GetFairnessKey()}); err != nil {
		return nil, statusErr(err)
	}
	if err := svc.adm.admit(ctx, ns, t.GetWorkflow()); err != nil {
		return nil, statusErr(err)
	}
	if chosen {
		// As for a submission: a task of that id may have ended and moved
		// to the archive.
		arch, err := svc.archivedSubmission(ctx, &reevev1.SubmitTaskRequest{Namespace: ns, TaskId: req.GetNewTaskId()})
		if err != nil {
			return nil, statusErr(err)
		}
		if arch != nil {
			if string(arch.GetRequestDigest()) != string(digest) {
				return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "new_task_id: task %q already exists with a different request (it ended and was moved to the archive)", req.GetNewTaskId()))
			}
			return &reevev1.RerunTaskResponse{Task: arch.GetTask()}, nil
		}
	}
	rec := &storev1.TaskRecord{Task: t, RequestDigest: digest, TraceContext: telemetry.Inject(ctx)}
	existing, created, err := svc.eng.create(ctx, rec, false)
	if err != nil {
		return nil, statusErr(err)
	}
	if !created {
		if string(existing.GetRequestDigest()) != string(digest) {
			return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "new_task_id: task %q already exists with a different request", req.GetNewTaskId()))
		}
		return &reevev1.RerunTaskResponse{Task: existing.GetTask()}, nil
	}
	return &reevev1.RerunTaskResponse{Task: rec.GetTask(), Created: true}, nil
}

package scheduler

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

// SubmitTask: the cheap refusals first (the caller's token bucket,
// admission.go; no new task while etcd is near its space quota, space.go),
// then validation, the namespace's cap on active tasks (admission.go), the
// workflow, shedding past capacity (overload.go), a chosen id's
// idempotency (the archive: archive.go, dedup.go; etcd: the create) and
// the create, claimed for an idle agent here when there is one (claim.go).

// SubmitTask implements SchedulerService.
func (svc *schedulerService) SubmitTask(ctx context.Context, req *reevev1.SubmitTaskRequest) (*reevev1.SubmitTaskResponse, error) {
	if err := svc.eng.adm.allowSubmit(ctx); err != nil {
		return nil, statusErr(err)
	}
	if err := svc.eng.space.allow(); err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateSubmit(req); err != nil {
		return nil, statusErr(err)
	}
	req = proto.Clone(req).(*reevev1.SubmitTaskRequest)
	req.Namespace = workflow.Namespace(req.GetNamespace())
	if err := svc.eng.adm.allowActive(ctx, req.GetNamespace()); err != nil {
		// Idempotency wins over the limit: a retried submission of a task
		// that exists gets it back.
		if t := svc.eng.sameSubmission(ctx, req); t != nil {
			return &reevev1.SubmitTaskResponse{Task: t}, nil
		}
		return nil, statusErr(err)
	}
	generated := req.GetTaskId() == ""
	if generated {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, statusErr(err)
		}
		req.TaskId = id.String()
	}
	wf, latest, err := svc.eng.resolveWorkflow(ctx, req)
	if err != nil {
		return nil, statusErr(err)
	}
	digest, err := requestDigest(req)
	if err != nil {
		return nil, statusErr(err)
	}
	if err := svc.eng.shed.allow(req.GetNamespace(), wf); err != nil {
		// Idempotency wins over shedding (overload.go), as far as this
		// scheduler knows the task without asking etcd (knownSubmission).
		if t := svc.eng.knownSubmission(req, digest, generated); t != nil {
			return &reevev1.SubmitTaskResponse{Task: t}, nil
		}
		return nil, statusErr(err)
	}
	ctx, span := svc.eng.tel.startSubmit(ctx, req)
	defer span.End()
	if !generated {
		if rec, err := svc.eng.archivedSubmission(ctx, req); err != nil || rec != nil {
			if err != nil {
				return nil, statusErr(err)
			}
			if string(rec.GetRequestDigest()) != string(digest) {
				return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request (it ended and was moved to the archive)", req.GetTaskId()))
			}
			return &reevev1.SubmitTaskResponse{Task: rec.GetTask()}, nil
		}
	}
	existing, created, err := svc.eng.createTask(ctx, req, wf, digest, latest)
	if errors.Is(err, store.ErrStaleWorkflow) {
		// The cached latest version is not the latest any more (registered
		// through another scheduler): create the task on the version a
		// linearizable read returns. That read is the submission's
		// linearization point, so no compare is needed this time.
		ref := req.GetWorkflowRef()
		if wf, err = svc.eng.store.LatestWorkflowForSubmit(ctx, req.GetNamespace(), ref.GetName()); err != nil {
			return nil, statusErr(err)
		}
		existing, created, err = svc.eng.createTask(ctx, req, wf, digest, false)
	}
	if err != nil {
		return nil, statusErr(err)
	}
	if !created && string(existing.GetRequestDigest()) != string(digest) {
		return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request", req.GetTaskId()))
	}
	return &reevev1.SubmitTaskResponse{Task: existing.GetTask(), Created: created}, nil
}

// createTask creates the task of a submission running wf (which it keeps
// in the record), claimed on submit when an agent here has room
// (engine.create). ofLatest: wf is the cached latest version, to be checked
// in the create's transaction (store.CreateTaskOfLatest).
func (s *Server) createTask(ctx context.Context, req *reevev1.SubmitTaskRequest, wf *reevev1.Workflow, digest []byte, ofLatest bool) (existing *storev1.TaskRecord, created bool, err error) {
	if d := s.opts.scheduleToStart; d > 0 && wf.GetDefaultScheduleToStartTimeout() == nil {
		wf.DefaultScheduleToStartTimeout = durationpb.New(d)
	}
	rec := &storev1.TaskRecord{
		Task:          taskstate.New(req.GetNamespace(), req.GetTaskId(), wf, req.GetInput(), s.opts.clock.Now()),
		RequestDigest: digest,
		TraceContext:  telemetry.Inject(ctx),
	}
	return s.eng.create(ctx, rec, ofLatest)
}

// sameSubmission returns the task req already created (same client-chosen
// id, same request), or nil.
func (s *Server) sameSubmission(ctx context.Context, req *reevev1.SubmitTaskRequest) *reevev1.Task {
	if req.GetTaskId() == "" {
		return nil
	}
	digest, err := requestDigest(req)
	if err != nil {
		return nil
	}
	rec, err := s.eng.getTask(ctx, req.GetNamespace(), req.GetTaskId())
	if err != nil || string(rec.GetRequestDigest()) != string(digest) {
		return nil
	}
	return rec.GetTask()
}

// knownSubmission returns the task a refused submission already created
// when this scheduler's record cache has it (same client-chosen id, same
// request digest), or nil. It reads no etcd, so that a refusal stays cheap:
// a task created through another scheduler, or already ended, is not
// found, and the client's retry after the RetryInfo delay gets it.
func (s *Server) knownSubmission(req *reevev1.SubmitTaskRequest, digest []byte, generated bool) *reevev1.Task {
	if generated {
		return nil
	}
	rec, ok := s.store.CachedTask(req.GetNamespace(), req.GetTaskId())
	if !ok || string(rec.GetRequestDigest()) != string(digest) {
		return nil
	}
	return rec.GetTask()
}

// resolveWorkflow returns the workflow a submission runs, as the snapshot the
// task keeps (a copy the caller may modify). latest: it is the latest
// version the store's workflow cache knows, which the create must check.
func (s *Server) resolveWorkflow(ctx context.Context, req *reevev1.SubmitTaskRequest) (wf *reevev1.Workflow, latest bool, err error) {
	if inline := req.GetInlineWorkflow(); inline != nil {
		wf := proto.Clone(inline).(*reevev1.Workflow)
		wf.Namespace = req.GetNamespace()
		wf.Version = 0
		if proto.Size(wf) > workflow.MaxWorkflowBytes {
			return nil, false, &workflow.FieldError{Field: "inline_workflow", Reason: fmt.Sprintf("definition is %d bytes encoded, more than %d", proto.Size(wf), workflow.MaxWorkflowBytes)}
		}
		if err := s.store.CheckWorkflowOps("inline_workflow", wf); err != nil {
			return nil, false, err
		}
		return wf, false, nil
	}
	ref := req.GetWorkflowRef()
	return s.store.WorkflowForSubmit(ctx, req.GetNamespace(), ref.GetName(), ref.GetVersion())
}

// requestDigest fingerprints a submission, to tell an idempotent retry from a
// conflicting reuse of the task id.
func requestDigest(req *reevev1.SubmitTaskRequest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

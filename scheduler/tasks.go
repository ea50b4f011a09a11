package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// SubmitTask implements SchedulerService.
func (s *Server) SubmitTask(ctx context.Context, req *reevev1.SubmitTaskRequest) (*reevev1.SubmitTaskResponse, error) {
	if err := s.adm.allowSubmit(ctx); err != nil {
		return nil, statusErr(err)
	}
	if err := s.space.allow(); err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateSubmit(req); err != nil {
		return nil, statusErr(err)
	}
	req = proto.Clone(req).(*reevev1.SubmitTaskRequest)
	req.Namespace = workflow.Namespace(req.GetNamespace())
	if err := s.adm.allowActive(ctx, req.GetNamespace()); err != nil {
		// Idempotency wins over the limit: a retried submission of a task
		// that exists gets it back.
		if t := s.sameSubmission(ctx, req); t != nil {
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
	wf, latest, err := s.resolveWorkflow(ctx, req)
	if err != nil {
		return nil, statusErr(err)
	}
	digest, err := requestDigest(req)
	if err != nil {
		return nil, statusErr(err)
	}
	ctx, span := s.tel.startSubmit(ctx, req)
	defer span.End()
	existing, created, err := s.createTask(ctx, req, wf, digest, latest)
	if errors.Is(err, store.ErrStaleWorkflow) {
		// The cached latest version is not the latest any more (registered
		// through another scheduler): create the task on the version a
		// linearizable read returns. That read is the submission's
		// linearization point, so no compare is needed this time.
		ref := req.GetWorkflowRef()
		if wf, err = s.store.GetWorkflow(ctx, req.GetNamespace(), ref.GetName(), 0); err != nil {
			return nil, statusErr(err)
		}
		existing, created, err = s.createTask(ctx, req, wf, digest, false)
	}
	if err != nil {
		return nil, statusErr(err)
	}
	if !created && string(existing.GetRequestDigest()) != string(digest) {
		return nil, status.Errorf(codes.AlreadyExists, "task_id: task %q already exists with a different request", req.GetTaskId())
	}
	if created {
		s.adm.created(req.GetNamespace())
		s.tel.submittedOne(ctx, req.GetNamespace())
		s.log.InfoContext(ctx, "task submitted", "task_id", req.GetTaskId(), "namespace", req.GetNamespace(), "workflow", wf.GetName())
	}
	return &reevev1.SubmitTaskResponse{Task: existing.GetTask(), Created: created}, nil
}

// createTask creates the task of a submission running wf (which it keeps
// in the record), claimed on submit when an agent here has room. ofLatest:
// wf is the cached latest version, to be checked in the create's
// transaction (store.CreateTaskOfLatest).
func (s *Server) createTask(ctx context.Context, req *reevev1.SubmitTaskRequest, wf *reevev1.Workflow, digest []byte, ofLatest bool) (existing *storev1.TaskRecord, created bool, err error) {
	if d := s.opts.scheduleToStart; d > 0 && wf.GetDefaultScheduleToStartTimeout() == nil {
		wf.DefaultScheduleToStartTimeout = durationpb.New(d)
	}
	rec := &storev1.TaskRecord{
		Task:          taskstate.New(req.GetNamespace(), req.GetTaskId(), wf, req.GetInput(), s.opts.clock.Now()),
		RequestDigest: digest,
		TraceContext:  telemetry.Inject(ctx),
	}
	// With an agent idle here, the task is created with its first step
	// already claimed: one write instead of two
	// (WithDispatchOnSubmit; writeclaim.go).
	var claim *writeClaim
	if s.opts.dispatchOnSubmit {
		claim = &writeClaim{d: s.disp}
		_ = claim.run(rec.GetTask(), "", s.opts.clock.Now(), nil)
	}
	if ofLatest {
		existing, created, err = s.store.CreateTaskOfLatest(ctx, rec)
	} else {
		existing, created, err = s.store.CreateTask(ctx, rec)
	}
	if claim != nil {
		// Created: the agent gets the step. The id was taken: the existing
		// task is the answer, and the reservation is released.
		s.deliverClaim(rec, claim.settle(err, created, "claim on submit"))
	}
	return existing, created, err
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
	v, err := s.store.GetTask(ctx, req.GetNamespace(), req.GetTaskId())
	if err != nil || string(v.Record.GetRequestDigest()) != string(digest) {
		return nil
	}
	return v.Record.GetTask()
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

// GetTask implements SchedulerService.
func (s *Server) GetTask(ctx context.Context, req *reevev1.GetTaskRequest) (*reevev1.GetTaskResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	v, err := s.store.GetTask(ctx, ns, req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.GetTaskResponse{Task: v.Record.GetTask()}, nil
}

// WatchTask implements SchedulerService.
func (s *Server) WatchTask(req *reevev1.WatchTaskRequest, stream reevev1.SchedulerService_WatchTaskServer) error {
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
		watchErr <- s.store.WatchTask(ctx, ns, req.GetTaskId(), func(t *reevev1.Task) bool {
			select { // this goroutine alone puts, so after this the put cannot block
			case <-newest:
			default:
			}
			newest <- t
			return taskstate.TerminalTask(t.GetState())
		})
	}()
	for t := range newest {
		if err := stream.Send(&reevev1.WatchTaskResponse{Task: t}); err != nil {
			return err
		}
	}
	if err := <-watchErr; err != nil && stream.Context().Err() == nil {
		return statusErr(err)
	}
	return nil
}

// CancelTask implements SchedulerService.
func (s *Server) CancelTask(ctx context.Context, req *reevev1.CancelTaskRequest) (*reevev1.CancelTaskResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	if len(req.GetReason()) > workflow.MaxReasonBytes {
		return nil, status.Errorf(codes.InvalidArgument, "reason: longer than %d bytes", workflow.MaxReasonBytes)
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "canceled by client"
	}
	before, after, err := s.store.UpdateTask(ctx, ns, req.GetTaskId(), func(t *reevev1.Task) error {
		return taskstate.Cancel(t, reason, actorOf(ctx, "client"), s.opts.clock.Now())
	})
	if errors.Is(err, taskstate.ErrTerminal) {
		return &reevev1.CancelTaskResponse{Task: before.GetTask()}, nil
	}
	if err != nil {
		return nil, statusErr(err)
	}
	s.tel.ended1(before.GetTask(), after.GetTask())
	s.disp.revoke(taskstate.Revoked(before.GetTask(), after.GetTask(), nil), "task canceled")
	return &reevev1.CancelTaskResponse{Task: after.GetTask()}, nil
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

// page validates paging arguments. Page tokens are opaque to clients.
func page(size int32, token string) (int, string, error) {
	switch {
	case size < 0:
		return 0, "", &workflow.FieldError{Field: "page_size", Reason: "must not be negative"}
	case size > maxPageSize:
		return 0, "", &workflow.FieldError{Field: "page_size", Reason: fmt.Sprintf("at most %d", maxPageSize)}
	case size == 0:
		size = defaultPageSize
	}
	if token == "" {
		return int(size), "", nil
	}
	after, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", &workflow.FieldError{Field: "page_token", Reason: "malformed"}
	}
	return int(size), string(after), nil
}

func pageToken(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }

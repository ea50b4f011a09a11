package scheduler

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

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

// SubmitTask reads validate → admit → create:
//   - validate: the request's fields, the workflow it runs (registered or
//     inline), its id (generated here when not chosen) and its digest;
//   - admit: the admission chain (admission.go): the caller's rate, etcd's
//     space, the namespace's cap on active tasks, the scheduler's capacity;
//   - create: a chosen id's idempotency across the archive (archive
//     lookups, dedup.go) and etcd (the create's own compare), then the
//     create, claimed for an idle agent here when there is one
//     (engine.create).
//
// One rule for a repeated submission (same chosen id, same request): it
// gets its task back, whether the task still runs, ended, moved to the
// archive, or admission refuses the repeat (resubmitted).

// submission is a validated SubmitTaskRequest.
type submission struct {
	req       *reevev1.SubmitTaskRequest // a copy: namespace resolved, id set
	generated bool                       // the id was generated here
	wf        *reevev1.Workflow          // the snapshot the task keeps
	latest    bool                       // wf is the cached latest version: the create checks it
	digest    []byte                     // requestDigest of req
	// backstop, when set, is the task's start_backstop: this scheduler
	// starts it at its start time itself (schedule_starts.go).
	backstop time.Duration
}

// SubmitTask implements SchedulerService.
func (svc *schedulerService) SubmitTask(ctx context.Context, req *reevev1.SubmitTaskRequest) (*reevev1.SubmitTaskResponse, error) {
	return svc.submit(ctx, req, 0)
}

// submit is SubmitTask creating the task with start_backstop backstop
// (0: none).
func (svc *schedulerService) submit(ctx context.Context, req *reevev1.SubmitTaskRequest, backstop time.Duration) (*reevev1.SubmitTaskResponse, error) {
	sub, err := svc.validate(ctx, req)
	if err != nil {
		return nil, statusErr(err)
	}
	sub.backstop = backstop
	if err := svc.adm.admit(ctx, sub.req.GetNamespace(), sub.wf); err != nil {
		if t := svc.resubmitted(ctx, sub, err); t != nil {
			return &reevev1.SubmitTaskResponse{Task: t}, nil
		}
		return nil, statusErr(err)
	}
	ctx, span := svc.tel.startSubmit(ctx, sub.req)
	defer span.End()
	rec, created, err := svc.create(ctx, sub)
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.SubmitTaskResponse{Task: rec.GetTask(), Created: created}, nil
}

// validate checks a submission and resolves what it names.
func (svc *schedulerService) validate(ctx context.Context, req *reevev1.SubmitTaskRequest) (*submission, error) {
	if err := workflow.ValidateSubmit(req); err != nil {
		return nil, err
	}
	req = proto.Clone(req).(*reevev1.SubmitTaskRequest)
	req.Namespace = workflow.Namespace(req.GetNamespace())
	// The default priority, given or not, is kept as 0: the same task and
	// digest as a submission without one (priority.go).
	req.Priority = workflow.NormalPriority(req.GetPriority())
	sub := &submission{req: req, generated: req.GetTaskId() == ""}
	if sub.generated {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		req.TaskId = id.String()
	}
	if _, err := workflow.ValidateStartTime("start_time", req.GetStartTime(), svc.opts.clock.Now()); err != nil {
		return nil, err
	}
	var err error
	if sub.wf, sub.latest, err = svc.resolveWorkflow(ctx, req); err != nil {
		return nil, err
	}
	if sub.digest, err = requestDigest(req); err != nil {
		return nil, err
	}
	return sub, nil
}

// resubmitted is the task a refused submission repeats: the task with its
// chosen id created by the same request, or nil. This scheduler's record
// cache answers for every refusal; etcd and the archive are read only when
// the refusal is the namespace's cap on active tasks, the one refusal that
// is not about load. So a refusal under load stays cheap, and the client's
// retry after the RetryInfo delay gets its task.
func (svc *schedulerService) resubmitted(ctx context.Context, sub *submission, why error) *reevev1.Task {
	if sub.generated {
		return nil
	}
	ns, id := sub.req.GetNamespace(), sub.req.GetTaskId()
	rec, ok := svc.store.CachedTask(ns, id)
	var r *refusal
	if !ok && errors.As(why, &r) && r.reason == ReasonActiveTaskLimit {
		var err error
		rec, _, err = svc.tasks.Get(ctx, ns, id)
		ok = err == nil
	}
	if !ok || string(rec.GetRequestDigest()) != string(sub.digest) {
		return nil
	}
	return rec.GetTask()
}

// create creates the task of an admitted submission, or returns the task
// its chosen id already names when the request is the same (created
// false); a different request with that id is refused ALREADY_EXISTS.
func (svc *schedulerService) create(ctx context.Context, sub *submission) (*storev1.TaskRecord, bool, error) {
	if !sub.generated {
		rec, err := svc.archivedSubmission(ctx, sub.req)
		if err != nil {
			return nil, false, err
		}
		if rec != nil {
			if string(rec.GetRequestDigest()) != string(sub.digest) {
				return nil, false, refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request (it ended and was moved to the archive)", sub.req.GetTaskId())
			}
			return rec, false, nil
		}
	}
	existing, created, err := svc.createTask(ctx, sub, sub.wf, sub.latest)
	if errors.Is(err, store.ErrStaleWorkflow) {
		// The cached latest version is not the latest any more (registered
		// through another scheduler): create the task on the version a
		// linearizable read returns. That read is the submission's
		// linearization point, so no compare is needed this time.
		var wf *reevev1.Workflow
		if wf, err = svc.store.LatestWorkflowForSubmit(ctx, sub.req.GetNamespace(), sub.req.GetWorkflowRef().GetName()); err != nil {
			return nil, false, err
		}
		existing, created, err = svc.createTask(ctx, sub, wf, false)
	}
	if err != nil {
		return nil, false, err
	}
	if !created && string(existing.GetRequestDigest()) != string(sub.digest) {
		return nil, false, refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request", sub.req.GetTaskId())
	}
	return existing, created, nil
}

// createTask creates the task of a submission running wf (which it keeps
// in the record), claimed on submit when an agent here has room
// (engine.create). ofLatest: wf is the cached latest version, to be checked
// in the create's transaction (store.CreateTaskOfLatest).
func (svc *schedulerService) createTask(ctx context.Context, sub *submission, wf *reevev1.Workflow, ofLatest bool) (existing *storev1.TaskRecord, created bool, err error) {
	req, digest := sub.req, sub.digest
	if d := svc.opts.scheduleToStart; d > 0 && wf.GetDefaultScheduleToStartTimeout() == nil {
		wf.DefaultScheduleToStartTimeout = durationpb.New(d)
	}
	for try := 0; ; try++ {
		now := svc.opts.clock.Now()
		start, _ := workflow.ValidateStartTime("start_time", req.GetStartTime(), now) // checked in validate
		t := taskstate.NewAt(req.GetNamespace(), req.GetTaskId(), wf, req.GetInput(), now, start, workflow.TaskTimeout(wf, req))
		t.Labels = req.GetLabels()
		t.Priority = req.GetPriority()
		if _, awaiting := taskstate.AwaitingStart(t); awaiting && sub.backstop > 0 {
			t.StartBackstop = durationpb.New(sub.backstop)
		}
		if err := flowKeys(t, req); err != nil { // flowkeys.go: concurrency keys and the fairness key
			return nil, false, err
		}
		if try == 0 && taskstate.KeyWaiting(t) {
			// A free slot of its workflow's concurrency key, if it has one
			// and one looks free: else it is created waiting (taskkeys.go).
			// A task waiting for its start time takes none until it starts.
			t.KeySlot = svc.disp.freeTaskSlot(t)
			taskstate.StartWaits(t, now) // with the slot, its ready waits and sleeps begin
		}
		rec := &storev1.TaskRecord{
			Task:          proto.Clone(t).(*reevev1.Task),
			RequestDigest: digest,
			TraceContext:  telemetry.Inject(ctx),
		}
		existing, created, err = svc.eng.create(ctx, rec, ofLatest)
		svc.disp.createdTaskSlot(t, t.GetKeySlot(), created)
		// A slot taken meanwhile (of its workflow's key, or the max_running
		// slot of a claim on submit): again, waiting, with another claim.
		if !errors.Is(err, store.ErrSlotTaken) || try >= 2 {
			return existing, created, err
		}
	}
}

// resolveWorkflow returns the workflow a submission runs, as the snapshot the
// task keeps (a copy the caller may modify). latest: it is the latest
// version the store's workflow cache knows, which the create must check.
func (svc *schedulerService) resolveWorkflow(ctx context.Context, req *reevev1.SubmitTaskRequest) (wf *reevev1.Workflow, latest bool, err error) {
	if inline := req.GetInlineWorkflow(); inline != nil {
		wf := proto.Clone(inline).(*reevev1.Workflow)
		wf.Namespace = req.GetNamespace()
		wf.Version = 0
		if proto.Size(wf) > workflow.MaxWorkflowBytes {
			return nil, false, &workflow.FieldError{Field: "inline_workflow", Reason: fmt.Sprintf("definition is %d bytes encoded, more than %d", proto.Size(wf), workflow.MaxWorkflowBytes)}
		}
		if err := svc.store.CheckWorkflowOps("inline_workflow", wf); err != nil {
			return nil, false, err
		}
		return wf, false, nil
	}
	ref := req.GetWorkflowRef()
	return svc.store.WorkflowForSubmit(ctx, req.GetNamespace(), ref.GetName(), ref.GetVersion())
}

// requestDigest fingerprints a submission, to tell an idempotent retry from a
// conflicting reuse of the task id.
func requestDigest(req *reevev1.SubmitTaskRequest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	return digestOf(b), nil
}

// digestOf is the SHA-256 of an encoded request.
func digestOf(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

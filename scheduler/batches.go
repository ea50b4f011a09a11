package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Batch jobs (issue 37; docs/batches.md): one operator action applied to
// every task of a namespace that matches a filter, durable in etcd. Every
// scheduler runs a batch runner: it claims a running job that no live
// scheduler owns (store.ClaimBatch, under its lease), lists the matching
// tasks page by page from where the last saved page ended, applies the
// action to each through the action's own RPC handler, in process, and
// saves the page's counts with the position after it (store.SaveBatch,
// fenced by its claim). A runner that dies leaves the job to the next
// claim, which repeats at most the page it was on: the job's id is each
// action's request_id (a rerun's new task id is derived from it), so a task
// acted on once is answered, not acted on again.

// batchPage is how many tasks a runner lists, acts on and saves at once.
const batchPage = 500

// batchActionsInFlight bounds a runner's concurrent actions.
const batchActionsInFlight = 32

// batchKeep is how long a finished job is kept.
const batchKeep = 7 * 24 * time.Hour

// maxBatchErrors bounds BatchJob.errors.
const maxBatchErrors = 20

// batchService implements reeve.v1.BatchService.
type batchService struct {
	reevev1.UnimplementedBatchServiceServer
	opts  *options
	store *store.Store
}

// StartBatch implements BatchService.
func (svc *batchService) StartBatch(ctx context.Context, req *reevev1.StartBatchRequest) (*reevev1.StartBatchResponse, error) {
	ns, err := validateBatch(req)
	if err != nil {
		return nil, statusErr(err)
	}
	req = proto.Clone(req).(*reevev1.StartBatchRequest)
	req.Namespace = ns
	if req.GetBatchId() == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, statusErr(err)
		}
		req.BatchId = id.String()
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, statusErr(err)
	}
	digest := digestOf(b)
	now := svc.opts.clock.Now()
	job := &reevev1.BatchJob{
		Namespace: ns, Id: req.GetBatchId(), Action: req.GetAction(), Filter: req.GetFilter(), Reason: req.GetReason(),
		Step: req.GetStep(), NoCompensate: req.GetNoCompensate(), State: reevev1.BatchState_BATCH_STATE_RUNNING,
		CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now), CreatedBy: actorOf(ctx, "operator"),
	}
	got, created, err := svc.store.CreateBatch(ctx, &storev1.BatchRecord{Job: job, RequestDigest: digest})
	if err != nil {
		return nil, statusErr(err)
	}
	if !created && string(got.Record.GetRequestDigest()) != string(digest) {
		return nil, statusErr(refuse(codes.AlreadyExists, ReasonBatchAlreadyExists, "batch_id: batch %q already exists with a different request", req.GetBatchId()))
	}
	return &reevev1.StartBatchResponse{Job: got.Record.GetJob(), Created: created}, nil
}

// validateBatch checks a StartBatchRequest and returns its namespace.
func validateBatch(req *reevev1.StartBatchRequest) (string, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return "", err
	}
	if _, ok := reevev1.BatchAction_name[int32(req.GetAction())]; !ok || req.GetAction() == reevev1.BatchAction_BATCH_ACTION_UNSPECIFIED {
		return "", &workflow.FieldError{Field: "action", Reason: "required: CANCEL, RETRY, COMPENSATE, PAUSE, RESUME or RERUN"}
	}
	if req.GetAction() == reevev1.BatchAction_BATCH_ACTION_RERUN && req.GetStep() == "" {
		return "", &workflow.FieldError{Field: "step", Reason: "required for RERUN: the step to run from"}
	}
	if req.GetStep() != "" {
		if err := workflow.ValidateName("step", req.GetStep()); err != nil {
			return "", err
		}
	}
	if req.GetNoCompensate() && req.GetAction() != reevev1.BatchAction_BATCH_ACTION_CANCEL {
		return "", &workflow.FieldError{Field: "no_compensate", Reason: "only for CANCEL"}
	}
	f := req.GetFilter()
	if _, ok := reevev1.TaskState_name[int32(f.GetState())]; !ok {
		return "", &workflow.FieldError{Field: "filter.state", Reason: fmt.Sprintf("unknown task state %d", f.GetState())}
	}
	if f.GetWorkflow() != "" {
		if err := workflow.ValidateName("filter.workflow", f.GetWorkflow()); err != nil {
			return "", err
		}
	}
	if err := workflow.ValidateLabels("filter.labels", f.GetLabels()); err != nil {
		return "", err
	}
	if len(req.GetReason()) > workflow.MaxReasonBytes {
		return "", &workflow.FieldError{Field: "reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)}
	}
	if id := req.GetBatchId(); id != "" {
		if err := workflow.ValidateTaskID("batch_id", id); err != nil {
			return "", err
		}
	}
	return workflow.Namespace(req.GetNamespace()), nil
}

// GetBatch implements BatchService.
func (svc *batchService) GetBatch(ctx context.Context, req *reevev1.GetBatchRequest) (*reevev1.GetBatchResponse, error) {
	ns, err := batchKey(req.GetNamespace(), req.GetBatchId())
	if err != nil {
		return nil, statusErr(err)
	}
	b, err := svc.store.GetBatch(ctx, ns, req.GetBatchId())
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.GetBatchResponse{Job: b.Record.GetJob()}, nil
}

// ListBatches implements BatchService.
func (svc *batchService) ListBatches(ctx context.Context, req *reevev1.ListBatchesRequest) (*reevev1.ListBatchesResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	bs, err := svc.store.ListBatches(ctx, workflow.Namespace(req.GetNamespace()))
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.ListBatchesResponse{}
	for _, b := range bs {
		resp.Jobs = append(resp.Jobs, b.Record.GetJob())
	}
	return resp, nil
}

// CancelBatch implements BatchService.
func (svc *batchService) CancelBatch(ctx context.Context, req *reevev1.CancelBatchRequest) (*reevev1.CancelBatchResponse, error) {
	ns, err := batchKey(req.GetNamespace(), req.GetBatchId())
	if err != nil {
		return nil, statusErr(err)
	}
	for range 10 { // a runner saving a page between the read and the write
		b, err := svc.store.UpdateBatch(ctx, ns, req.GetBatchId(), func(rec *storev1.BatchRecord) error {
			j := rec.GetJob()
			if !store.IsBatchRunning(j) {
				return errBatchEnded
			}
			now := timestamppb.New(svc.opts.clock.Now())
			j.State, j.EndTime, j.UpdateTime = reevev1.BatchState_BATCH_STATE_CANCELED, now, now
			return nil
		})
		switch {
		case errors.Is(err, errBatchEnded):
			return &reevev1.CancelBatchResponse{Job: b.Record.GetJob()}, nil
		case errors.Is(err, store.ErrConflict):
			continue
		case err != nil:
			return nil, statusErr(err)
		}
		return &reevev1.CancelBatchResponse{Job: b.Record.GetJob()}, nil
	}
	return nil, statusErr(fmt.Errorf("cancel batch %s: %w", req.GetBatchId(), store.ErrConflict))
}

var errBatchEnded = errors.New("batch ended")

func batchKey(ns, id string) (string, error) {
	if err := workflow.ValidateNamespace("namespace", ns); err != nil {
		return "", err
	}
	if id == "" {
		return "", &workflow.FieldError{Field: "batch_id", Reason: "required"}
	}
	if err := workflow.ValidateTaskID("batch_id", id); err != nil {
		return "", err
	}
	return workflow.Namespace(ns), nil
}

// batchRunner runs the batch jobs no live scheduler runs.
type batchRunner struct {
	opts  *options
	store *store.Store
	tasks *taskread.Reader
	log   *slog.Logger
	lease func() clientv3.LeaseID
	// The handlers each action goes through, in process.
	scheduler  *schedulerService
	supervisor *supervisorService

	mu      sync.Mutex
	running map[string]bool // "<ns>/<id>" of the jobs this runner runs
}

// run claims and runs jobs until ctx ends: at once when one is written,
// and every few seconds for the jobs of a scheduler that died.
func (r *batchRunner) run(ctx context.Context) {
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go r.store.WatchBatches(ctx, 0, poke)
	t := r.opts.clock.NewTicker(5 * time.Second)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r.claim(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.Chan():
		}
	}
}

// claim starts the running jobs this runner can claim, and deletes the
// finished ones past batchKeep.
func (r *batchRunner) claim(ctx context.Context, wg *sync.WaitGroup) {
	lease := r.lease()
	if lease == 0 {
		return
	}
	bs, err := r.store.ListBatches(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug("list batch jobs", "err", err)
		}
		return
	}
	now := r.opts.clock.Now()
	for _, b := range bs {
		j := b.Record.GetJob()
		key := j.GetNamespace() + "/" + j.GetId()
		if !store.IsBatchRunning(j) {
			if end := j.GetEndTime(); end != nil && now.Sub(end.AsTime()) > batchKeep {
				_ = r.store.DeleteBatch(ctx, j.GetNamespace(), j.GetId(), b.Revision)
			}
			continue
		}
		r.mu.Lock()
		mine := r.running[key]
		r.mu.Unlock()
		if mine {
			continue
		}
		owner, err := r.store.ClaimBatch(ctx, j.GetNamespace(), j.GetId(), lease)
		if err != nil || owner == 0 {
			continue
		}
		r.mu.Lock()
		r.running[key] = true
		r.mu.Unlock()
		wg.Go(func() {
			defer func() {
				r.mu.Lock()
				delete(r.running, key)
				r.mu.Unlock()
			}()
			r.runJob(ctx, j.GetNamespace(), j.GetId(), owner)
		})
	}
}

// runJob runs one claimed job, page after page, until it ends, is
// canceled, or this runner loses it.
func (r *batchRunner) runJob(ctx context.Context, ns, id string, owner int64) {
	log := r.log.With("batch_id", id, "namespace", ns)
	for ctx.Err() == nil {
		b, err := r.store.GetBatch(ctx, ns, id)
		if err != nil {
			if !store.IsNotFound(err) && ctx.Err() == nil {
				log.Warn("read batch job; trying again", "err", err)
				r.pause(ctx)
				continue
			}
			return
		}
		if !store.IsBatchRunning(b.Record.GetJob()) {
			return
		}
		rec := proto.Clone(b.Record).(*storev1.BatchRecord)
		done, err := r.page(ctx, rec)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("batch page; trying again", "err", err)
				r.pause(ctx)
			}
			continue
		}
		j := rec.GetJob()
		now := timestamppb.New(r.opts.clock.Now())
		j.UpdateTime = now
		if done {
			j.State, j.EndTime = reevev1.BatchState_BATCH_STATE_SUCCEEDED, now
		}
		if _, err := r.store.SaveBatch(ctx, rec, b.Revision, owner); err != nil {
			// Canceled meanwhile (the next read ends the run), or no longer
			// ours: the page is done again by whoever runs it next, and the
			// request ids make that harmless.
			if !errors.Is(err, store.ErrConflict) {
				log.Warn("save batch progress", "err", err)
			}
			continue
		}
		if done {
			log.Info("batch job done", "matched", j.GetMatched(), "applied", j.GetApplied(), "skipped", j.GetSkipped(), "failed", j.GetFailed())
			return
		}
	}
}

// pause waits a second before a failed read or page is tried again.
func (r *batchRunner) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-r.opts.clock.After(time.Second):
	}
}

// page acts on the next page of the job's tasks, adding the outcomes to
// rec's counts and moving its position; done reports there are no more.
func (r *batchRunner) page(ctx context.Context, rec *storev1.BatchRecord) (done bool, err error) {
	j := rec.GetJob()
	f := j.GetFilter()
	q := store.TaskQuery{
		Namespace: j.GetNamespace(), State: f.GetState(), Workflow: f.GetWorkflow(), IDPrefix: f.GetTaskIdPrefix(),
		CreatedBefore: j.GetCreateTime().AsTime(), Limit: batchPage, Basic: true, Labels: f.GetLabels(),
	}
	if b := f.GetCreatedBefore(); b != nil && b.AsTime().Before(q.CreatedBefore) {
		q.CreatedBefore = b.AsTime()
	}
	if a := f.GetCreatedAfter(); a != nil {
		q.CreatedAfter = a.AsTime()
	}
	if rec.GetAfterId() != "" {
		q.After = &store.ListPosition{Created: time.Unix(0, rec.GetAfterCreatedUnixNano()), ID: rec.GetAfterId()}
	}
	page, _, err := r.tasks.List(ctx, q, false)
	if err != nil {
		return false, err
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, batchActionsInFlight)
	)
	for _, t := range page.Tasks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.act(ctx, j, t)
			mu.Lock()
			defer mu.Unlock()
			j.Matched++
			switch status.Code(err) {
			case codes.OK:
				j.Applied++
			case codes.FailedPrecondition, codes.NotFound:
				j.Skipped++
			default:
				j.Failed++
				j.Errors = append(j.Errors, &reevev1.BatchTaskError{TaskId: t.GetId(), Message: status.Convert(err).Message()})
				if n := len(j.Errors); n > maxBatchErrors {
					j.Errors = j.Errors[n-maxBatchErrors:]
				}
			}
		})
	}
	wg.Wait()
	// Where the next page starts: after the last task examined, which a
	// page filtered as it reads (labels) may not have returned.
	if page.Next != nil {
		rec.AfterCreatedUnixNano, rec.AfterId = page.Next.Created.UnixNano(), page.Next.ID
	}
	return page.Next == nil, nil
}

// act applies the job's action to one task through the action's handler.
func (r *batchRunner) act(ctx context.Context, j *reevev1.BatchJob, t *reevev1.Task) error {
	ns, id := j.GetNamespace(), t.GetId()
	requestID := "batch-" + j.GetId()
	reason := fmt.Sprintf("batch %s by %s", j.GetId(), j.GetCreatedBy())
	if j.GetReason() != "" {
		reason += ": " + j.GetReason()
	}
	var err error
	switch j.GetAction() {
	case reevev1.BatchAction_BATCH_ACTION_CANCEL:
		_, err = r.scheduler.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: ns, TaskId: id, Reason: reason, NoCompensate: j.GetNoCompensate()})
	case reevev1.BatchAction_BATCH_ACTION_RETRY:
		step := j.GetStep()
		if step == "" {
			if step = firstFailed(t); step == "" {
				return status.Errorf(codes.FailedPrecondition, "task %s has no FAILED step", id)
			}
		}
		_, err = r.supervisor.RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: ns, TaskId: id, Step: step, Reason: reason, RequestId: requestID})
	case reevev1.BatchAction_BATCH_ACTION_COMPENSATE:
		_, err = r.supervisor.CompensateTask(ctx, &reevev1.CompensateTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID})
	case reevev1.BatchAction_BATCH_ACTION_PAUSE:
		_, err = r.supervisor.PauseTask(ctx, &reevev1.PauseTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID})
	case reevev1.BatchAction_BATCH_ACTION_RESUME:
		_, err = r.supervisor.ResumeTask(ctx, &reevev1.ResumeTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID})
	case reevev1.BatchAction_BATCH_ACTION_RERUN:
		newID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("reeve-batch/"+ns+"/"+j.GetId()+"/"+id)).String()
		_, err = r.scheduler.RerunTask(ctx, &reevev1.RerunTaskRequest{Namespace: ns, TaskId: id, FromStep: j.GetStep(), NewTaskId: newID, Reason: reason})
	}
	return err
}

// firstFailed is the name of the task's first FAILED step, or "".
func firstFailed(t *reevev1.Task) string {
	for _, s := range t.GetSteps() {
		if s.GetState() == reevev1.StepState_STEP_STATE_FAILED {
			return s.GetName()
		}
	}
	return ""
}

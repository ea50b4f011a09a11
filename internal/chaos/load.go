package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// plannedTask is one task of the load and its designed behaviour.
type plannedTask struct {
	ID string
	// Workflow is Workflow, WorkflowFail (operator retry share) or
	// WorkflowWide.
	Workflow string
	Input    workload.Input
	// CancelAfter: an operator cancels the task this long after it was
	// accepted (0: never), at whatever point it has reached.
	CancelAfter time.Duration
	// CompensateAfter: an operator compensates the task (CompensateTask,
	// no fence) this long after it was accepted (0: never), at whatever
	// point it has reached. Never together with CancelAfter.
	CompensateAfter time.Duration
	// OperatorRetry: the task runs WorkflowFail, its Input.FailStep fails
	// for good in its first round, the task ends FAILED and an operator
	// retries the failed step (RetryStep, no fence); it must then end
	// SUCCEEDED. Never together with CancelAfter or CompensateAfter.
	OperatorRetry bool
	// RetryWrongAfter: an operator also calls RetryStep on RetryWrongStep
	// this long after the task was accepted (0: never), while it is still
	// running, and again on a step that is not FAILED once the task is
	// FAILED: FAILED_PRECONDITION is the expected outcome.
	RetryWrongAfter time.Duration
	RetryWrongStep  string
	// PauseAfter: an operator pauses the task (PauseTask) this long after
	// it was accepted (0: never) and resumes it PauseFor later; nothing of
	// it may be dispatched in between.
	PauseAfter, PauseFor time.Duration
	// InBatch: the task carries the label batchLabel, which batch jobs
	// pause and resume, round after round (batchPauseResume).
	InBatch bool
	// Wait: the task runs workload.WorkflowWait and the load completes
	// its waits as planned (waits.go); zero for every other task.
	Wait waitPlan
}

// batchLabel marks the tasks batch jobs act on; batchShare is their share.
var batchLabel = map[string]string{"chaos-batch": "1"}

const batchShare = 0.2

// cancelShare, compensateShare and retryShare are the shares of tasks an
// operator cancels, compensates, or retries once they failed.
const (
	cancelShare     = 0.05
	compensateShare = 0.05
	retryShare      = 0.05
	pauseShare      = 0.05
)

// wideFailStep picks what fails for good in a wide task: the join (30 %:
// every compensable root is then undone), a root (20 %: the running roots
// are canceled, the succeeded compensable ones undone) or nothing.
func wideFailStep(rng *rand.Rand) string {
	switch r := rng.Float64(); {
	case r < 0.3:
		return workload.WideJoin
	case r < 0.5:
		return workload.WideStepNames()[rng.IntN(workload.WideWidth)]
	}
	return ""
}

// planTasks decides every task's behaviour from rng and streams of the seed
// of their own (one per kind of operator action, one for the wide tasks),
// so that adding a kind leaves a seed's other choices what they were.
func planTasks(rng *rand.Rand, cfg Config) []plannedTask {
	out := make([]plannedTask, cfg.Tasks)
	for i := range out {
		in := workload.Input{TransientPerMl: cfg.TransientPerMille, WorkMillis: 20 + rng.IntN(400)}
		if rng.Float64() < cfg.FailShare {
			in.FailStep = workload.StepNames[rng.IntN(len(workload.StepNames))]
		}
		out[i] = plannedTask{ID: fmt.Sprintf("chaos-%d-%05d", cfg.Seed, i), Workflow: workload.Workflow, Input: in}
	}
	// Wide tasks replace tasks spread evenly over the submission, so that
	// they run under faults.
	wide := rand.New(rand.NewPCG(cfg.Seed^0x77de, cfg.Seed))
	for k := range min(cfg.WideTasks, cfg.Tasks) {
		i := (k + 1) * cfg.Tasks / (min(cfg.WideTasks, cfg.Tasks) + 1)
		out[i] = plannedTask{ID: fmt.Sprintf("chaos-%d-wide-%05d", cfg.Seed, i), Workflow: workload.WorkflowWide,
			Input: workload.Input{TransientPerMl: cfg.TransientPerMille, WorkMillis: 20 + wide.IntN(100), FailStep: wideFailStep(wide)}}
	}
	ops := rand.New(rand.NewPCG(cfg.Seed^0xc0ffee, cfg.Seed))
	for i := range out {
		if ops.Float64() < cancelShare {
			out[i].CancelAfter = time.Duration(ops.Int64N(int64(2 * time.Second)))
		}
	}
	comp := rand.New(rand.NewPCG(cfg.Seed^0xc0de, cfg.Seed))
	for i := range out {
		if comp.Float64() < compensateShare && out[i].CancelAfter == 0 {
			out[i].CompensateAfter = time.Duration(comp.Int64N(int64(2*time.Second))) + time.Millisecond
		}
	}
	// Operator retries: every draw is made for every task, so that a task's
	// choices do not depend on its neighbours'.
	retry := rand.New(rand.NewPCG(cfg.Seed^0x4e7e7, cfg.Seed))
	for i := range out {
		pick, step, wrongStep := retry.Float64(), retry.IntN(len(workload.StepNames)), retry.IntN(len(workload.StepNames)-1)
		wrong, after := retry.Float64(), time.Duration(retry.Int64N(int64(2*time.Second)))+time.Millisecond
		pt := &out[i]
		if pick >= retryShare || pt.CancelAfter > 0 || pt.CompensateAfter > 0 || pt.Workflow != workload.Workflow {
			continue
		}
		pt.Workflow, pt.OperatorRetry = workload.WorkflowFail, true
		pt.Input.FailStep, pt.Input.FailUntilAttempt = workload.StepNames[step], workload.MaxAttempts
		if wrong < 0.5 {
			// Any step but the one that fails.
			pt.RetryWrongAfter, pt.RetryWrongStep = after, slices.Delete(slices.Clone(workload.StepNames), step, step+1)[wrongStep]
		}
	}
	batch := rand.New(rand.NewPCG(cfg.Seed^0xba7c4, cfg.Seed))
	for i := range out {
		out[i].InBatch = batch.Float64() < batchShare
	}
	pause := rand.New(rand.NewPCG(cfg.Seed^0x9a05e, cfg.Seed))
	for i := range out {
		pick, after, dur := pause.Float64(), time.Duration(pause.Int64N(int64(2*time.Second)))+time.Millisecond, time.Duration(pause.Int64N(int64(time.Second)))
		if pick < pauseShare {
			out[i].PauseAfter, out[i].PauseFor = after, dur
		}
	}
	planWaits(out, cfg.Seed)
	return out
}

// batchRounds is how many times batchPauseResume pauses and resumes.
const batchRounds = 5

// batchPauseResume, batchRounds times: starts a batch job that pauses the
// tasks labeled batchLabel a second after the last round, waits for it to
// end, and after half a second more starts one that resumes them (each
// retried through faults, as operatorAct does), and waits for that to end.
func batchPauseResume(ctx context.Context, b reevev1.BatchServiceClient) error {
	type step struct {
		after  time.Duration
		action reevev1.BatchAction
	}
	var steps []step
	for range batchRounds {
		steps = append(steps, step{time.Second, reevev1.BatchAction_BATCH_ACTION_PAUSE}, step{500 * time.Millisecond, reevev1.BatchAction_BATCH_ACTION_RESUME})
	}
	for i, step := range steps {
		id := fmt.Sprintf("chaos-batch-%d", i)
		if err := operatorAct(ctx, step.after, "start batch "+id, func(rctx context.Context) error {
			_, err := b.StartBatch(rctx, &reevev1.StartBatchRequest{BatchId: id, Action: step.action, Reason: "chaos: batch",
				Filter: &reevev1.TaskFilter{Labels: batchLabel}})
			return err
		}); err != nil {
			return err
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := b.GetBatch(rctx, &reevev1.GetBatchRequest{BatchId: id})
			cancel()
			if err == nil && resp.GetJob().GetState() != reevev1.BatchState_BATCH_STATE_RUNNING {
				break
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return fmt.Errorf("batch %s did not end: %w", id, errors.Join(err, ctx.Err()))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond): // polling the job's progress
			}
		}
	}
	return nil
}

// pauseOne pauses the task after its delay and resumes it PauseFor later,
// as an operator would (see operatorAct).
func pauseOne(ctx context.Context, sup reevev1.SupervisorServiceClient, pt plannedTask) error {
	if err := operatorAct(ctx, pt.PauseAfter, "pause "+pt.ID, func(rctx context.Context) error {
		_, err := sup.PauseTask(rctx, &reevev1.PauseTaskRequest{TaskId: pt.ID, Reason: "chaos: operator pause", RequestId: "chaos-pause-" + pt.ID})
		return err
	}); err != nil {
		return err
	}
	return operatorAct(ctx, pt.PauseFor, "resume "+pt.ID, func(rctx context.Context) error {
		_, err := sup.ResumeTask(rctx, &reevev1.ResumeTaskRequest{TaskId: pt.ID, Reason: "chaos: operator resume", RequestId: "chaos-resume-" + pt.ID})
		return err
	})
}

// dialSchedulers returns a client spreading requests round-robin over addrs,
// over mutual TLS with the files of creds (plaintext when creds is empty).
func dialSchedulers(addrs []string, creds tlsconfig.Files) (*grpc.ClientConn, error) {
	return dial.Schedulers(dial.Config{Address: strings.Join(addrs, ","), CA: creds.CA, Cert: creds.Cert, Key: creds.Key})
}

// submit submits the planned tasks at rate per second, each retried (same
// task id: idempotent) until accepted. It returns how many were accepted.
// Tasks are submitted, read and canceled with the TLS files of client, the
// operators' RetryStep and CompensateTask are sent with those of operator
// (empty: plaintext), as a client application and an operator would.
func submit(ctx context.Context, addrs []string, client, operator, approverFiles tlsconfig.Files, plan []plannedTask, rate float64, ops *operatorLog, waits *waitLog, logf func(string, ...any)) (int, error) {
	cc, err := dialSchedulers(addrs, client)
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	apc, err := dialSchedulers(addrs, approverFiles)
	if err != nil {
		return 0, err
	}
	defer apc.Close()
	approver := reevev1.NewSchedulerServiceClient(apc)
	opc, err := dialSchedulers(addrs, operator)
	if err != nil {
		return 0, err
	}
	defer opc.Close()
	c := reevev1.NewSchedulerServiceClient(cc)
	sup := reevev1.NewSupervisorServiceClient(opc)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	// An operator pauses the labeled tasks with a batch job, and resumes
	// them with another once it ended, a few rounds (batchPauseResume).
	wg.Go(func() {
		if err := batchPauseResume(ctx, reevev1.NewBatchServiceClient(opc)); err != nil {
			errOnce.Do(func() { firstErr = err })
		}
	})
	sem := make(chan struct{}, 32)
	every := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i, pt := range plan {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			// The pool bounds submissions in flight; operators act
			// outside it (an operator retry waits for the task to fail).
			err := submitOne(ctx, c, pt)
			<-sem
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			accepted.Add(1)
			if pt.Workflow == workload.WorkflowWait {
				wg.Go(func() { completeWaits(ctx, c, approver, pt, waits) })
			}
			if pt.CancelAfter > 0 {
				if err := cancelOne(ctx, c, pt); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
			if pt.CompensateAfter > 0 {
				if err := operatorAct(ctx, pt.CompensateAfter, "compensate "+pt.ID, func(rctx context.Context) error {
					_, err := sup.CompensateTask(rctx, &reevev1.CompensateTaskRequest{TaskId: pt.ID, Reason: "chaos: operator compensate"})
					return err
				}); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
			if pt.OperatorRetry {
				if err := retryOperator(ctx, c, sup, pt, ops); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
			if pt.PauseAfter > 0 {
				if err := pauseOne(ctx, sup, pt); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
		if (i+1)%500 == 0 {
			logf("chaos: %d tasks submitted", i+1)
		}
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return int(accepted.Load()), firstErr
}

func submitOne(ctx context.Context, c reevev1.SchedulerServiceClient, pt plannedTask) error {
	in, err := structpb.NewValue(map[string]any{"fail_step": pt.Input.FailStep, "fail_until_attempt": pt.Input.FailUntilAttempt,
		"transient_per_mille": pt.Input.TransientPerMl, "work_ms": pt.Input.WorkMillis})
	if err != nil {
		return err
	}
	req := &reevev1.SubmitTaskRequest{TaskId: pt.ID, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: pt.Workflow}}, Input: in}
	if pt.InBatch {
		req.Labels = batchLabel
	}
	if pt.Workflow == workload.WorkflowWait {
		pt.Wait.apply(req, time.Now())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.SubmitTask(rctx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK, codes.AlreadyExists:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.NotFound, codes.ResourceExhausted, codes.Canceled:
			// A fault, or the workflow not registered yet: retry, same id.
		default:
			return fmt.Errorf("submit %s: %w", pt.ID, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("submit %s: %w", pt.ID, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cancelOne cancels the task after its delay, as an operator would (see
// operatorAct).
func cancelOne(ctx context.Context, c reevev1.SchedulerServiceClient, pt plannedTask) error {
	return operatorAct(ctx, pt.CancelAfter, "cancel "+pt.ID, func(rctx context.Context) error {
		_, err := c.CancelTask(rctx, &reevev1.CancelTaskRequest{TaskId: pt.ID, Reason: "chaos: operator cancel"})
		return err
	})
}

// operatorAct runs an operator action after its delay, retried through
// faults; a refusal because of the task's state (FAILED_PRECONDITION: it
// ended, or the action does not apply where it is) is an outcome, not an
// error.
func operatorAct(ctx context.Context, after time.Duration, what string, act func(context.Context) error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(after): // the operator's chosen moment, not a wait for a condition
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := act(rctx)
		cancel()
		switch status.Code(err) {
		case codes.OK, codes.FailedPrecondition:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitDrained polls the tasks' counts (etcd's state index and then the
// archive, when there is one: tasks that ended and moved there) until n
// tasks are terminal and none is pending, running or compensating, or
// timeout passes. It returns when.
func waitDrained(ctx context.Context, tasks *taskread.Reader, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var live, ended int64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		live, ended = 0, 0
		counts, _, err := tasks.Count(ctx, "default", "")
		for st, cnt := range counts {
			switch {
			case taskstate.TerminalTask(st):
				ended += cnt
			case st == reevev1.TaskState_TASK_STATE_PENDING || st == reevev1.TaskState_TASK_STATE_RUNNING || st == reevev1.TaskState_TASK_STATE_COMPENSATING:
				live += cnt
			}
		}
		if err == nil && live == 0 && ended >= int64(n) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return time.Now(), fmt.Errorf("not drained after %v: %d tasks still live, %d of %d ended", timeout, live, ended, n)
}

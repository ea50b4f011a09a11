package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// operatorLog records what the operators' RetryStep calls were answered.
type operatorLog struct {
	mu sync.Mutex
	// accepted and refused count RetryStep calls answered OK and
	// FAILED_PRECONDITION; wrongRefused those of them made at a wrong point.
	accepted, refused, wrongRefused int
	// appliedThenRefused: retries of the failed step whose answer was lost
	// to a fault, re-sent and refused because the first call had been
	// applied (counted as accepted).
	appliedThenRefused int
	// violations: a RetryStep accepted where it cannot apply (a step that
	// is not FAILED of a FAILED task, or of a SUCCEEDED task), or a retry
	// operator that gave up.
	violations []Violation
}

func (l *operatorLog) count(code codes.Code, wrong bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch code {
	case codes.OK:
		l.accepted++
	case codes.FailedPrecondition:
		l.refused++
		if wrong {
			l.wrongRefused++
		}
	}
}

func (l *operatorLog) violate(v Violation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, v)
}

func (l *operatorLog) report(r *Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.RetriesAccepted, r.RetriesRefused, r.RetriesRefusedAtWrongPoints = l.accepted, l.refused, l.wrongRefused
	r.RetriesAppliedThenRefused = l.appliedThenRefused
	for _, v := range l.violations {
		r.add(v)
	}
}

// retryOperator acts as an operator on a task of the retry share: maybe a
// RetryStep at a wrong point first (the task still running), then it waits
// for the task to end; when it ended FAILED it retries a step that is not
// FAILED (must be refused, and the task stays FAILED: nothing else moves
// it), then the FAILED step, and waits again, at most five rounds. Once the
// task SUCCEEDED, a retry of a succeeded step must be refused.
func retryOperator(ctx context.Context, c reevev1.SchedulerServiceClient, sup reevev1.SupervisorServiceClient, pt plannedTask, log *operatorLog) error {
	retryStep := func(rctx context.Context, step, reason string) (codes.Code, error) {
		_, err := sup.RetryStep(rctx, &reevev1.RetryStepRequest{TaskId: pt.ID, Step: step, Reason: reason})
		return status.Code(err), err
	}
	if pt.RetryWrongAfter > 0 {
		var code codes.Code
		if err := operatorAct(ctx, pt.RetryWrongAfter, "retry "+pt.ID+" (wrong point)", func(rctx context.Context) (err error) {
			code, err = retryStep(rctx, pt.RetryWrongStep, "chaos: operator retry at a random point")
			return err
		}); err != nil {
			return err
		}
		// Accepted only if the task happened to be FAILED with that step
		// FAILED; the checker's history invariants judge it.
		log.count(code, true)
	}
	deadline := time.Now().Add(3 * time.Minute)
	rounds := 0
	for time.Now().Before(deadline) {
		t, err := getTask(ctx, c, pt.ID)
		if err != nil {
			return err
		}
		switch t.GetState() {
		case reevev1.TaskState_TASK_STATE_SUCCEEDED:
			code, err := retryRefused(ctx, retryStep, workload.StepNames[0], "chaos: operator retry of a succeeded task")
			if err != nil {
				return err
			}
			log.count(code, true)
			if code == codes.OK {
				log.violate(Violation{Invariant: "operator retry refused where it does not apply", Task: pt.ID, Step: workload.StepNames[0], Detail: "RetryStep of a step of a SUCCEEDED task was accepted"})
			}
			return nil
		case reevev1.TaskState_TASK_STATE_FAILED:
			rounds++
			if rounds > 5 {
				log.violate(Violation{Invariant: "a retried task ends SUCCEEDED", Task: pt.ID, Detail: "FAILED again after 5 operator retries"})
				return nil
			}
			var failed, other string
			for _, st := range t.GetSteps() {
				if st.GetState() == reevev1.StepState_STEP_STATE_FAILED {
					failed = st.GetName()
				} else if other == "" {
					other = st.GetName()
				}
			}
			if other != "" && pt.RetryWrongAfter > 0 {
				code, err := retryRefused(ctx, retryStep, other, "chaos: operator retry of a step that is not FAILED")
				if err != nil {
					return err
				}
				log.count(code, true)
				if code == codes.OK {
					log.violate(Violation{Invariant: "operator retry refused where it does not apply", Task: pt.ID, Step: other,
						Detail: "RetryStep of a step that is not FAILED, of a FAILED task, was accepted"})
				}
			}
			if failed == "" {
				log.violate(Violation{Invariant: "a retried task ends SUCCEEDED", Task: pt.ID, Detail: "the task is FAILED but none of its steps is"})
				return nil
			}
			code, err := retryRefused(ctx, retryStep, failed, "chaos: operator retry of the failed step")
			if err != nil {
				return err
			}
			if code != codes.OK {
				// A call re-sent after a fault (its answer lost) is refused
				// when the first one was applied: RetryStep without a fence
				// is not idempotent. Nothing but the operator moves a FAILED
				// task, so the task having moved on tells.
				t, err := getTask(ctx, c, pt.ID)
				if err != nil {
					return err
				}
				if st := taskstate.FindStep(t, failed); t.GetState() == reevev1.TaskState_TASK_STATE_FAILED && st.GetState() == reevev1.StepState_STEP_STATE_FAILED {
					log.count(code, false)
					log.violate(Violation{Invariant: "a retried task ends SUCCEEDED", Task: pt.ID, Step: failed, Detail: "RetryStep of the FAILED step of a FAILED task was refused"})
					return nil
				}
				code = codes.OK
				log.mu.Lock()
				log.appliedThenRefused++
				log.mu.Unlock()
			}
			log.count(code, false)
		case reevev1.TaskState_TASK_STATE_CANCELED, reevev1.TaskState_TASK_STATE_COMPENSATED:
			return nil // the checker reports it: nothing here cancels or compensates
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond): // an operator polling the task
		}
	}
	log.violate(Violation{Invariant: "a retried task ends SUCCEEDED", Task: pt.ID, Detail: "not ended 3 minutes after it was accepted"})
	return nil
}

// retryRefused calls RetryStep through faults and returns its answer, OK or
// FAILED_PRECONDITION.
func retryRefused(ctx context.Context, retryStep func(context.Context, string, string) (codes.Code, error), step, reason string) (codes.Code, error) {
	var code codes.Code
	err := operatorAct(ctx, 0, "retry step "+step, func(rctx context.Context) (err error) {
		code, err = retryStep(rctx, step, reason)
		return err
	})
	return code, err
}

// getTask reads a task through faults.
func getTask(ctx context.Context, c reevev1.SchedulerServiceClient, id string) (*reevev1.Task, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.GetTask(rctx, &reevev1.GetTaskRequest{TaskId: id})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return resp.GetTask(), nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		default:
			return nil, fmt.Errorf("get task %s: %w", id, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("get task %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package taskstate

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// ErrNotExpired means a supervisor named an execution whose deadline
// (complete-by, or schedule-to-start deadline while queued) has not passed
// (by the scheduler's clock).
var ErrNotExpired = errors.New("taskstate: execution has not expired")

// ErrNotFailed means an operator asked to retry a step that is not FAILED.
var ErrNotFailed = errors.New("taskstate: step is not failed")

// Action is a supervisor's decision for an expired execution.
type Action int

const (
	// ActionRetry queues the next attempt after a delay.
	ActionRetry Action = iota + 1
	// ActionCompensate undoes the whole task.
	ActionCompensate
	// ActionFail fails the task and alerts an operator.
	ActionFail
)

func (a Action) String() string {
	switch a {
	case ActionRetry:
		return "retry"
	case ActionCompensate:
		return "compensate"
	case ActionFail:
		return "fail"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Expiry error codes, recorded as the step's last error and matched against
// RetryPolicy.non_retryable_error_codes.
const (
	// CodeDeadlineExceeded: a dispatched attempt passed its complete-by.
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeScheduleToStart: a queued attempt was not claimed by any agent
	// before its schedule-to-start deadline.
	CodeScheduleToStart = "schedule_to_start_timeout"
)

// ExpiryCode is the error code an expiry of the step's current execution
// records: CodeScheduleToStart while it is queued, else CodeDeadlineExceeded.
func ExpiryCode(s *reevev1.Step) string {
	if Queued(s) {
		return CodeScheduleToStart
	}
	return CodeDeadlineExceeded
}

// Decide is the supervisor's policy for an execution of s that passed its
// deadline (complete-by while dispatched, schedule-to-start deadline while
// queued), counting this expiry as a failure: retry after the backoff while
// attempts remain and the expiry's code (ExpiryCode) is not listed as
// non-retryable; otherwise the step's escalation (wait then retry after
// escalation_wait, compensate, or fail). A compensation that runs out of
// attempts fails the task. It holds no business knowledge: only the step's
// policy and failure count.
func Decide(t *reevev1.Task, s *reevev1.Step) (Action, time.Duration) {
	spec := Spec(t, s.GetName())
	policy := workflow.EffectiveRetryPolicy(t.GetWorkflow(), spec)
	if Compensating(s) {
		policy = workflow.CompensationRetryPolicy(t.GetWorkflow(), spec)
	}
	failures := s.GetFailureCount() + 1
	if failures < policy.GetMaxAttempts() && workflow.Retryable(policy, &reevev1.StepError{Code: ExpiryCode(s)}) {
		return ActionRetry, workflow.Backoff(policy, int(failures))
	}
	if Compensating(s) {
		return ActionFail, 0
	}
	switch workflow.EffectiveEscalation(spec) {
	case reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY:
		return ActionRetry, workflow.EscalationWait(spec)
	case reevev1.Escalation_ESCALATION_COMPENSATE:
		return ActionCompensate, 0
	}
	return ActionFail, 0
}

// expired returns the named execution if it is dispatched and past its
// complete-by, or queued and past its schedule-to-start deadline, recording
// the expiry as a failure. The execution leaves its agent or the ready
// queue; the caller decides what comes next.
func expired(t *reevev1.Task, name string, attempt int32, actor string, now time.Time) (*reevev1.Step, error) {
	if TerminalTask(t.GetState()) {
		return nil, ErrTerminal
	}
	s := FindStep(t, name)
	if s == nil {
		return nil, ErrUnknownStep
	}
	deadline, ok := Deadline(s)
	if !ok || s.GetAttempt() != attempt {
		return nil, fmt.Errorf("%w: step %q is %s at attempt %d, not dispatched or queued with a deadline at attempt %d", ErrStale, name, s.GetState(), s.GetAttempt(), attempt)
	}
	by := deadline.UTC().Format(time.RFC3339Nano)
	if now.Before(deadline) {
		return nil, fmt.Errorf("%w: deadline %s", ErrNotExpired, by)
	}
	s.FailureCount++
	if Queued(s) {
		msg := fmt.Sprintf("no agent of type %q claimed it before its schedule-to-start deadline %s", ExecutionType(t, s), by)
		dequeue(s)
		s.LastError = &reevev1.StepError{Code: CodeScheduleToStart, Message: msg}
		addHistory(t, now, "step.schedule_to_start_expired", name, attempt, actor, msg)
		return s, nil
	}
	release(s)
	s.LastError = &reevev1.StepError{Code: CodeDeadlineExceeded, Message: "no result before complete-by " + by}
	addHistory(t, now, "step.expired", name, attempt, actor, "no result before complete-by "+by)
	return s, nil
}

// RetryExpired records the expiry of (name, attempt) and queues the next
// attempt no earlier than now + delay. The old attempt's holder is revoked.
func RetryExpired(t *reevev1.Task, name string, attempt int32, delay time.Duration, actor string, now time.Time) error {
	s, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	requeue(t, s, now, delay)
	addHistory(t, now, "step.retry_scheduled", name, s.GetAttempt(), actor, "not before "+s.GetNotBefore().AsTime().UTC().Format(time.RFC3339Nano))
	return nil
}

// CompensateExpired records the expiry of (name, attempt), fails the step
// and compensates the task.
func CompensateExpired(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	if s := FindStep(t, name); Compensating(s) {
		return fmt.Errorf("%w: step %q is itself compensating", ErrStale, name)
	}
	s, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	s.State = reevev1.StepState_STEP_STATE_FAILED
	s.EndTime = timestamppb.New(now)
	startCompensation(t, orReason(reason, "step %q exhausted its attempts", name), actor, now)
	return nil
}

// FailExpired records the expiry of (name, attempt), fails the step and the
// task (an operator is alerted).
func FailExpired(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	s, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	s.State = reevev1.StepState_STEP_STATE_FAILED
	s.EndTime = timestamppb.New(now)
	failTask(t, orReason(reason, "step %q exhausted its attempts", name), actor, now)
	return nil
}

// ExpireNow moves the complete-by of a dispatched execution to now, so that
// the supervisor treats it as expired: used when its agent missed a
// heartbeat.
func ExpireNow(t *reevev1.Task, name string, attempt int32, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt {
		return ErrStale
	}
	if !now.Before(s.GetCompleteBy().AsTime()) {
		return nil
	}
	s.CompleteBy = timestamppb.New(now)
	addHistory(t, now, "step.heartbeat_missed", name, attempt, actor, "complete-by moved to now")
	return nil
}

// RetryFailed is an operator's retry of a FAILED step: its failure count is
// reset, a new attempt is queued now, and the task resumes — RUNNING, with
// the steps that were skipped or canceled waiting again, or COMPENSATING when
// the step's compensation had failed.
func RetryFailed(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if s.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		return fmt.Errorf("%w: step %q is %s", ErrNotFailed, name, s.GetState())
	}
	if attempt != 0 && attempt != s.GetAttempt() {
		return fmt.Errorf("%w: step %q is at attempt %d, not %d", ErrStale, name, s.GetAttempt(), attempt)
	}
	compensation := s.GetCompensation()
	for _, o := range t.GetSteps() {
		switch {
		case o == s:
		case compensation && o.GetState() == reevev1.StepState_STEP_STATE_CANCELED && o.GetCompensation():
			o.State = reevev1.StepState_STEP_STATE_COMPENSATING
			o.Attempt++
			o.FailureCount = 0
			o.EndTime = nil
			enqueue(t, o, now, time.Time{})
		case !compensation && (o.GetState() == reevev1.StepState_STEP_STATE_SKIPPED || o.GetState() == reevev1.StepState_STEP_STATE_CANCELED):
			o.State = reevev1.StepState_STEP_STATE_PENDING
			o.EndTime = nil
			dequeue(o)
		}
	}
	s.State = reevev1.StepState_STEP_STATE_PENDING
	t.State = reevev1.TaskState_TASK_STATE_RUNNING
	if compensation {
		s.State = reevev1.StepState_STEP_STATE_COMPENSATING
		t.State = reevev1.TaskState_TASK_STATE_COMPENSATING
	}
	s.FailureCount = 0
	s.EndTime = nil
	t.EndTime = nil
	t.Reason = ""
	requeue(t, s, now, 0)
	addHistory(t, now, "step.retried_by_operator", name, s.GetAttempt(), actor, reason)
	if !compensation {
		advance(t, now)
	}
	return nil
}

// Compensate is an operator's request to undo a task that is running or
// failed (not one whose compensation failed: retry that step instead).
func Compensate(t *reevev1.Task, reason, actor string, now time.Time) error {
	switch t.GetState() {
	case reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING:
	case reevev1.TaskState_TASK_STATE_FAILED:
		for _, s := range t.GetSteps() {
			if s.GetCompensation() && s.GetState() == reevev1.StepState_STEP_STATE_FAILED {
				return fmt.Errorf("%w: the compensation of step %q failed; retry that step instead", ErrTerminal, s.GetName())
			}
		}
		t.EndTime = nil
	default:
		return ErrTerminal
	}
	startCompensation(t, orReason(reason, "compensation requested by an operator"), actor, now)
	return nil
}

// FailTask is an operator's request to give up on a running task.
func FailTask(t *reevev1.Task, reason, actor string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return ErrTerminal
	}
	failTask(t, orReason(reason, "failed by an operator"), actor, now)
	return nil
}

func orReason(reason, format string, args ...any) string {
	if reason != "" {
		return reason
	}
	return fmt.Sprintf(format, args...)
}

package taskstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// ErrNotExpired means a supervisor named an execution whose deadline
// (complete-by, or schedule-to-start deadline while queued) has not passed
// (by the scheduler's clock).
var ErrNotExpired = errors.New("taskstate: execution has not expired")

// ErrNotFailed means an operator asked to retry a step that is not FAILED.
//
// RetryFailed returns a StateError that matches it (and ErrWrongState).
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
	case ActionWake:
		return "wake"
	case ActionStart:
		return "start"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// RecoveryAction is the action's RecoverSteps form.
func (a Action) RecoveryAction() reevev1.RecoveryAction {
	switch a {
	case ActionRetry, ActionWake, ActionStart:
		return reevev1.RecoveryAction_RECOVERY_ACTION_RETRY
	case ActionCompensate:
		return reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE
	}
	return reevev1.RecoveryAction_RECOVERY_ACTION_FAIL
}

// Expiry error codes, recorded as the step's last error and matched against
// RetryPolicy.non_retryable_error_codes.
const (
	// CodeDeadlineExceeded: a dispatched attempt passed its complete-by.
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeScheduleToStart: a queued attempt was not claimed by any agent
	// before its schedule-to-start deadline.
	CodeScheduleToStart = "schedule_to_start_timeout"
	// CodeBadInput: the agent could not read the step's input (the Go
	// SDK's typed handlers report it when the input does not decode into
	// the handler's type). It is a defect of the agent or of the submitted
	// input, not a business refusal; see NextAttempt.
	CodeBadInput = "bad_input"
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
// queued), counting this expiry as a failure: NextAttempt with CauseExpiry,
// as an action and the delay of a retry. It retries after the backoff while
// attempts remain and the expiry's code (ExpiryCode) is not listed as
// non-retryable; otherwise it applies the step's escalation (wait then retry
// after escalation_wait, compensate, or fail). A compensation that runs out
// of attempts fails the task. It holds no business knowledge: only the
// step's policy and failure count.
func Decide(t *reevev1.Task, s *reevev1.Step) (Action, time.Duration) {
	if a, ok := DecideTimer(t, s.GetName()); ok { // timers.go
		return a, 0
	}
	d := NextAttempt(t, s, CauseExpiry, nil)
	return d.Action, d.Delay
}

// expired returns the named execution if it is dispatched and past its
// complete-by, or queued and past its schedule-to-start deadline, recording
// the expiry as a failure, with NextAttempt's decision for it (made before
// the expiry was recorded). The execution leaves its agent or the ready
// queue; the caller applies the decision it was sent, which need not be
// that one (an operator's fenced retry_step).
func expired(t *reevev1.Task, name string, attempt int32, actor string, now time.Time) (*reevev1.Step, RetryDecision, error) {
	if TerminalTask(t.GetState()) {
		return nil, RetryDecision{}, &refusal{ErrTerminal, fmt.Sprintf("task %s is %s: nothing of it is left to recover", t.GetId(), StateName(t.GetState()))}
	}
	s := FindStep(t, name)
	if s == nil {
		return nil, RetryDecision{}, &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	deadline, ok := Deadline(s)
	if !ok || s.GetAttempt() != attempt {
		return nil, RetryDecision{}, &refusal{ErrStale, fmt.Sprintf("attempt %d of step %q is not the current execution with a deadline: the step is %s at attempt %d", attempt, name, StateName(s.GetState()), s.GetAttempt())}
	}
	by := deadline.UTC().Format(time.RFC3339Nano)
	if now.Before(deadline) {
		return nil, RetryDecision{}, &refusal{ErrNotExpired, fmt.Sprintf("attempt %d of step %q has not expired: its deadline is %s", attempt, name, by)}
	}
	d := NextAttempt(t, s, CauseExpiry, nil)
	s.FailureCount++
	if Queued(s) {
		msg := fmt.Sprintf("no agent of type %q claimed it before its schedule-to-start deadline %s", ExecutionType(t, s), by)
		dequeue(s)
		s.LastError = &reevev1.StepError{Code: CodeScheduleToStart, Message: msg}
		addHistory(t, now, "step.schedule_to_start_expired", name, attempt, actor, msg)
		return s, d, nil
	}
	msg := "no result before complete-by " + by
	if Waiting(s) || s.GetDeferred() {
		msg = "not completed from outside before complete-by " + by
	}
	if agent := s.GetLockedByAgent(); agent != "" {
		msg += " from agent " + agent
		if disconnected(t, name, attempt) {
			// The deadline in force is the disconnect's (ShortenOnDisconnect),
			// not the complete-by the attempt was dispatched with.
			msg = fmt.Sprintf("no result from agent %s, whose stream ended: it did not reconnect with the attempt before %s (its last heartbeat plus heartbeat_timeout, or the disconnect plus reassign_after_disconnect)", agent, by)
			if orig, ok := dispatchedCompleteBy(t, s); ok && orig.After(deadline) {
				msg += "; the attempt's complete-by was " + orig.UTC().Format(time.RFC3339Nano)
			}
		}
	}
	release(s)
	s.LastError = &reevev1.StepError{Code: CodeDeadlineExceeded, Message: msg}
	addHistory(t, now, "step.expired", name, attempt, actor, msg)
	return s, d, nil
}

// disconnected reports whether the history says the stream of the agent
// running (name, attempt) ended (step.agent_disconnected) and the agent did
// not adopt the execution again since.
func disconnected(t *reevev1.Task, name string, attempt int32) bool {
	lost := false
	for _, h := range t.GetHistory() {
		if h.GetStep() != name || h.GetAttempt() != attempt {
			continue
		}
		switch h.GetKind() {
		case "step.agent_disconnected":
			lost = true
		case "step.agent_reconnected":
			lost = false
		}
	}
	return lost
}

// RetryExpired records the expiry of (name, attempt) and queues the next
// attempt no earlier than now + delay. The old attempt's holder is revoked.
// When the step's policy allows no other attempt (NextAttempt escalates), the
// retry starts a new round of attempts: the failure count is reset to 0.
func RetryExpired(t *reevev1.Task, name string, attempt int32, delay time.Duration, actor string, now time.Time) error {
	s, d, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	if d.Escalated {
		// The supervisor retries such a step only by wait_then_retry (an
		// operator also by a fenced retry_step): a new round of attempts,
		// as when an agent's failure escalates.
		s.FailureCount = 0
	}
	requeue(t, s, now, delay)
	addHistory(t, now, "step.retry_scheduled", name, s.GetAttempt(), actor, "not before "+s.GetNotBefore().AsTime().UTC().Format(time.RFC3339Nano))
	return nil
}

// CompensateExpired records the expiry of (name, attempt), fails the step
// and compensates the task.
func CompensateExpired(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	if s := FindStep(t, name); Compensating(s) {
		return &refusal{ErrStale, fmt.Sprintf("step %q is itself compensating: an expired compensation fails the task, it does not compensate it", name)}
	}
	s, _, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	if reason == "" {
		reason = EscalationReason(t, s)
	}
	s.State = reevev1.StepState_STEP_STATE_FAILED
	s.EndTime = timestamppb.New(now)
	startCompensation(t, reason, actor, now)
	return nil
}

// FailExpired records the expiry of (name, attempt), fails the step and the
// task (an operator is alerted).
func FailExpired(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	s, _, err := expired(t, name, attempt, actor, now)
	if err != nil {
		return err
	}
	if reason == "" {
		reason = EscalationReason(t, s) // before the step leaves COMPENSATING
	}
	s.State = reevev1.StepState_STEP_STATE_FAILED
	s.EndTime = timestamppb.New(now)
	failTask(t, reason, actor, now)
	return nil
}

// ExpireNow moves the complete-by of a dispatched execution to now, so that
// the supervisor treats it as expired: used when its agent missed a
// heartbeat.
func ExpireNow(t *reevev1.Task, name string, attempt int32, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetDeferred() {
		return ErrStale // a deferred execution has no heartbeats to miss
	}
	if !now.Before(s.GetCompleteBy().AsTime()) {
		return nil
	}
	s.CompleteBy = timestamppb.New(now)
	addHistory(t, now, "step.heartbeat_missed", name, attempt, actor, "complete-by moved to now")
	return nil
}

// ErrWrongState means an operator action does not apply to the task or the
// step in its current state; the error's message names the state and what
// the action needs (see StateError).
var ErrWrongState = errors.New("taskstate: wrong state for this action")

// StateError is an operator action refused because of the task's or the
// step's state. Its message is meant for the operator, e.g.
// `task t-1 is COMPENSATED: retry_step needs the task FAILED`.
// It matches ErrWrongState, ErrTerminal when the task is terminal, and
// ErrNotFailed when retry_step found the step not FAILED.
type StateError struct {
	Msg       string
	Terminal  bool
	NotFailed bool
}

func (e *StateError) Error() string { return e.Msg }

// Is makes errors.Is match ErrWrongState, ErrTerminal for a terminal task
// and ErrNotFailed for a step that is not FAILED.
func (e *StateError) Is(target error) bool {
	return target == ErrWrongState || (e.Terminal && target == ErrTerminal) || (e.NotFailed && target == ErrNotFailed)
}

// Operator actions and the task states they accept. A supervisor's fenced
// call names an expired execution instead and is judged by it (see
// RetryExpired, CompensateExpired, FailExpired).
var (
	// CancelAccepts: a terminal task is left as it is (CancelTask answers
	// with it unchanged).
	CancelAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING}
	// FailAccepts lists the task states FailTask accepts.
	FailAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING}
	// CompensateAccepts lists the task states CompensateTask accepts (FAILED
	// only when no compensation failed: retry that step instead).
	CompensateAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_FAILED}
	// RetryAccepts lists the task states RetryStep accepts; the step must be
	// FAILED.
	RetryAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_FAILED}
)

// StateName is a task or step state without its enum prefix: "RUNNING".
func StateName[S interface{ String() string }](s S) string {
	n := s.String()
	if i := strings.Index(n, "_STATE_"); i >= 0 {
		return n[i+len("_STATE_"):]
	}
	return n
}

func needsTask(t *reevev1.Task, action string, accepts []reevev1.TaskState) error {
	if slices.Contains(accepts, t.GetState()) {
		return nil
	}
	names := make([]string, len(accepts))
	for i, a := range accepts {
		names[i] = StateName(a)
	}
	list := names[0]
	if n := len(names); n > 1 {
		list = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	return &StateError{
		Msg:      fmt.Sprintf("task %s is %s: %s needs the task %s", t.GetId(), StateName(t.GetState()), action, list),
		Terminal: TerminalTask(t.GetState()),
	}
}

// RetryFailed is an operator's retry of the FAILED step of a FAILED task:
// its failure count is reset and a new attempt is queued now (NextAttempt
// with CauseOperator).
//
// A failed forward step is retried only while nothing of the task was
// undone: no compensation has started (else retrying would redo work that is
// being or was undone; CompensateTask finishes the undo) and every upstream
// step, transitively, SUCCEEDED. The task becomes RUNNING, and the steps
// that were skipped or canceled wait for their dependencies again.
//
// A failed compensation is retried in place: the task becomes COMPENSATING
// again, and compensations that were canceled when the task failed are
// queued again in reverse dependency order.
func RetryFailed(t *reevev1.Task, name string, attempt int32, reason, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	if err := needsTask(t, "retry_step", RetryAccepts); err != nil {
		return err
	}
	if s.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		return &StateError{Msg: fmt.Sprintf("step %q of task %s is %s: retry_step needs the step FAILED", name, t.GetId(), StateName(s.GetState())), NotFailed: true}
	}
	if attempt != 0 && attempt != s.GetAttempt() {
		return &refusal{ErrStale, fmt.Sprintf("step %q is at attempt %d, not %d", name, s.GetAttempt(), attempt)}
	}
	compensation := s.GetCompensation()
	if !compensation {
		for _, o := range t.GetSteps() {
			if o.GetCompensation() {
				return &StateError{Msg: fmt.Sprintf("task %s was compensating when it failed (the compensation of step %q is %s): retry_step on %q would redo undone work; compensate_task finishes the undo",
					t.GetId(), o.GetName(), StateName(o.GetState()), name)}
			}
		}
		for _, up := range Upstream(t, name) {
			if st := FindStep(t, up).GetState(); st != reevev1.StepState_STEP_STATE_SUCCEEDED {
				return &StateError{Msg: fmt.Sprintf("step %q of task %s depends on step %q, which is %s: retry_step needs every upstream step SUCCEEDED", name, t.GetId(), up, StateName(st))}
			}
		}
	}
	s.LastError = nil
	s.EndTime = nil
	t.EndTime = nil
	t.Reason = ""
	if compensation {
		s.State = reevev1.StepState_STEP_STATE_COMPENSATING
		t.State = reevev1.TaskState_TASK_STATE_COMPENSATING
		retryNow(t, s, reason, actor, now)
		advanceCompensation(t, now)
		return nil
	}
	for _, o := range t.GetSteps() {
		if o != s && (o.GetState() == reevev1.StepState_STEP_STATE_SKIPPED || o.GetState() == reevev1.StepState_STEP_STATE_CANCELED) {
			o.State = reevev1.StepState_STEP_STATE_PENDING
			o.EndTime = nil
			dequeue(o)
		}
	}
	s.State = reevev1.StepState_STEP_STATE_PENDING
	t.State = reevev1.TaskState_TASK_STATE_RUNNING
	retryNow(t, s, reason, actor, now)
	advance(t, now)
	return nil
}

// retryNow queues the operator's retry of step s, already in the state of
// its next execution: NextAttempt's decision for CauseOperator, a new round
// of attempts (failure count 0), due at once.
func retryNow(t *reevev1.Task, s *reevev1.Step, reason, actor string, now time.Time) {
	d := NextAttempt(t, s, CauseOperator, nil)
	s.FailureCount = d.Failures
	requeue(t, s, now, d.Delay)
	addHistory(t, now, "step.retried_by_operator", s.GetName(), s.GetAttempt(), actor, reason)
}

// Compensate is an operator's request to undo a task that is pending,
// running or failed (not one whose compensation failed: retry that step
// instead). Compensations canceled when the task failed run again.
func Compensate(t *reevev1.Task, reason, actor string, now time.Time) error {
	if t.GetState() == reevev1.TaskState_TASK_STATE_CANCELED {
		// Canceled without undoing (CancelTask's no_compensate): what it
		// left done can still be undone.
		if !LeftToUndo(t) {
			return &StateError{Msg: fmt.Sprintf("task %s is CANCELED with nothing left to undo: compensate_task changes nothing", t.GetId()), Terminal: true}
		}
		t.EndTime = nil
		startCompensation(t, orReason(reason, "compensation of a canceled task requested by an operator"), actor, now)
		return nil
	}
	if err := needsTask(t, "compensate_task", CompensateAccepts); err != nil {
		return err
	}
	t.Paused = false // the undo asked for runs at once
	if t.GetState() == reevev1.TaskState_TASK_STATE_FAILED {
		for _, s := range t.GetSteps() {
			if s.GetCompensation() && s.GetState() == reevev1.StepState_STEP_STATE_FAILED {
				return &StateError{Msg: fmt.Sprintf("task %s is FAILED because the compensation of step %q failed: retry that step (retry_step) instead of compensate_task", t.GetId(), s.GetName())}
			}
		}
		t.EndTime = nil
	}
	startCompensation(t, orReason(reason, "compensation requested by an operator"), actor, now)
	return nil
}

// FailTask is an operator's request to give up on a pending, running or
// compensating task.
func FailTask(t *reevev1.Task, reason, actor string, now time.Time) error {
	if err := needsTask(t, "fail_task", FailAccepts); err != nil {
		return err
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

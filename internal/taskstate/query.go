package taskstate

import (
	"fmt"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// TerminalTask reports whether a task state is final.
func TerminalTask(s reevev1.TaskState) bool {
	switch s {
	case reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED,
		reevev1.TaskState_TASK_STATE_COMPENSATED, reevev1.TaskState_TASK_STATE_CANCELED:
		return true
	}
	return false
}

// LeftToUndo reports whether a task holds work that was done and can still
// be undone: a forward step that SUCCEEDED and declares a compensation, or a
// compensation that was interrupted (CANCELED) before it was confirmed
// (needsUndo). Cancel with undo compensates such a task; a CANCELED task
// with work left to undo stays listed among the tasks an operator acts on,
// as a FAILED one does, and can be compensated later; one without is as
// final as a SUCCEEDED one (store: ended tasks with an archive).
func LeftToUndo(t *reevev1.Task) bool {
	for _, s := range t.GetSteps() {
		if needsUndo(t, s) {
			return true
		}
	}
	return false
}

// Dispatched reports whether an execution of the step (forward or
// compensation) is held by an agent and so has a deadline.
func Dispatched(s *reevev1.Step) bool {
	switch s.GetState() {
	case reevev1.StepState_STEP_STATE_RUNNING:
		return true
	case reevev1.StepState_STEP_STATE_COMPENSATING:
		return s.GetCompleteBy() != nil
	}
	return false
}

// Queued reports whether the step waits in the ready queue for an agent.
func Queued(s *reevev1.Step) bool {
	switch s.GetState() {
	case reevev1.StepState_STEP_STATE_PENDING, reevev1.StepState_STEP_STATE_COMPENSATING:
		return s.GetReadyTime() != nil && s.GetCompleteBy() == nil
	}
	return false
}

// QueueExpiring reports whether the step is queued with a
// schedule-to-start deadline: the supervisor acts on it if no agent claims it
// in time.
func QueueExpiring(s *reevev1.Step) bool {
	return Queued(s) && s.GetScheduleToStartDeadline() != nil
}

// Waiting reports whether the step waits without an agent (WAITING): for a
// completion from outside or for its sleep to end, until its complete-by.
func Waiting(s *reevev1.Step) bool {
	return s.GetState() == reevev1.StepState_STEP_STATE_WAITING
}

// Deadline is the time by which someone must act on the step's current
// execution: its complete-by while dispatched or waiting, its
// schedule-to-start deadline while queued with one. ok is false when nothing
// is due (waiting for dependencies, queued without a schedule-to-start
// timeout, or done).
func Deadline(s *reevev1.Step) (at time.Time, ok bool) {
	switch {
	case Dispatched(s), Waiting(s) && s.GetCompleteBy() != nil:
		return s.GetCompleteBy().AsTime(), true
	case QueueExpiring(s):
		return s.GetScheduleToStartDeadline().AsTime(), true
	}
	return time.Time{}, false
}

// ScheduleToStart is how long the step's current execution (the forward
// step, or its compensation while COMPENSATING) may wait in the ready queue
// once due; 0 means no limit.
func ScheduleToStart(t *reevev1.Task, s *reevev1.Step) time.Duration {
	spec := Spec(t, s.GetName())
	if Compensating(s) {
		return workflow.CompensationScheduleToStart(t.GetWorkflow(), spec)
	}
	return workflow.EffectiveScheduleToStart(t.GetWorkflow(), spec)
}

// Compensating reports whether the step's current execution is its compensation.
func Compensating(s *reevev1.Step) bool {
	return s.GetState() == reevev1.StepState_STEP_STATE_COMPENSATING
}

// ExecutionType returns the step type an agent must handle for the step's
// current execution: the compensation's type while compensating.
func ExecutionType(t *reevev1.Task, s *reevev1.Step) string {
	if Compensating(s) {
		if spec := Spec(t, s.GetName()); spec != nil {
			return spec.GetCompensation().GetType()
		}
	}
	return s.GetType()
}

// Spec returns the definition of the named step, or nil.
func Spec(t *reevev1.Task, name string) *reevev1.StepSpec {
	for _, sp := range t.GetWorkflow().GetSteps() {
		if sp.GetName() == name {
			return sp
		}
	}
	return nil
}

// FindStep returns the named step of the task, or nil.
func FindStep(t *reevev1.Task, name string) *reevev1.Step {
	for _, s := range t.GetSteps() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// Ref names the current execution of a step.
func Ref(t *reevev1.Task, s *reevev1.Step) *reevev1.StepRef {
	return &reevev1.StepRef{Namespace: t.GetNamespace(), TaskId: t.GetId(), Step: s.GetName(), Attempt: s.GetAttempt()}
}

// Holder is an agent holding a dispatched execution.
type Holder struct {
	Ref       *reevev1.StepRef
	AgentID   string
	Scheduler string
}

// Revoked lists the executions dispatched in before that are no longer
// dispatched, with the same attempt, in after: their agents must be told to
// stop. The execution named by except (the one whose result caused the
// change) is left out.
func Revoked(before, after *reevev1.Task, except *reevev1.StepRef) []Holder {
	var out []Holder
	for _, old := range before.GetSteps() {
		if !Dispatched(old) || old.GetDeferred() { // a deferred one is no agent's
			continue
		}
		if except != nil && except.GetStep() == old.GetName() && except.GetAttempt() == old.GetAttempt() {
			continue
		}
		cur := FindStep(after, old.GetName())
		if Dispatched(cur) && cur.GetAttempt() == old.GetAttempt() {
			continue
		}
		out = append(out, Holder{Ref: Ref(before, old), AgentID: old.GetLockedByAgent(), Scheduler: old.GetLockedByScheduler()})
	}
	return out
}

// ErrorText is a step error as people read it: "code: message", the code
// once even when the message already starts with it (agents built with an
// SDK that put the code into the message), the message alone without a
// code, the code alone without a message.
func ErrorText(e *reevev1.StepError) string {
	code, msg := e.GetCode(), e.GetMessage()
	switch {
	case code == "":
		return msg
	case msg == "" || msg == code:
		return code
	case strings.HasPrefix(msg, code+": "):
		return msg
	}
	return code + ": " + msg
}

// EscalationReason says why step s escalates, with its last error as the
// root cause: `step "charge" failed permanently: card_declined: insufficient
// funds` when the error is not retryable (marked permanent by the agent, or
// its code listed in non_retryable_error_codes), else `step "charge"
// exhausted its 3 attempts: last error schedule_to_start_timeout: no agent
// of type "pay.charge" claimed it before ...`. A compensation is named
// "compensation of step ...".
func EscalationReason(t *reevev1.Task, s *reevev1.Step) string {
	what := fmt.Sprintf("step %q", s.GetName())
	if Compensating(s) {
		what = "compensation of " + what
	}
	policy := retryPolicy(t, s)
	last := ErrorText(s.GetLastError())
	if last == "" {
		last = "no error recorded"
	}
	if !workflow.Retryable(policy, s.GetLastError()) {
		if s.GetLastError().GetCode() == CodeBadInput && !Compensating(s) {
			return what + " failed permanently: " + last + " (the agent could not read its input: fix the agent or the input, then retry the step)"
		}
		return what + " failed permanently: " + last
	}
	attempts := "attempts"
	if n := s.GetFailureCount(); n == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("%s exhausted its %d %s: last error %s", what, s.GetFailureCount(), attempts, last)
}

// Shown is what a view of a task shows of step s: the type of its latest
// execution (its compensation's once its compensation started) and that
// execution's attempt counted from 1 (a compensation counts its own
// attempts, from its compensation.ready event).
func Shown(t *reevev1.Task, s *reevev1.Step) (typ string, attempt int32) {
	if !s.GetCompensation() {
		return s.GetType(), s.GetAttempt()
	}
	typ = s.GetType()
	if c := Spec(t, s.GetName()).GetCompensation().GetType(); c != "" {
		typ = c
	}
	h := t.GetHistory()
	for i := len(h) - 1; i >= 0; i-- { // the latest start of its compensation
		if e := h[i]; e.GetKind() == "compensation.ready" && e.GetStep() == s.GetName() && e.GetAttempt() > 0 && e.GetAttempt() <= s.GetAttempt() {
			return typ, s.GetAttempt() - e.GetAttempt() + 1
		}
	}
	// Its start is no longer in the history (older events dropped): its
	// failures so far, plus the execution now.
	return typ, s.GetFailureCount() + 1
}

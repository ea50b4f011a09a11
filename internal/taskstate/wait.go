package taskstate

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Steps completed from outside (issue 35, items 1 and 2).
//
// A step whose spec sets wait_for "external" is never queued for an agent:
// when it becomes ready (markReady), and whenever it is retried (requeue),
// it becomes WAITING at once, with a complete-by of now plus its timeout
// and no ready key; the store gives it a deadline key, so that the
// supervisor escalates it when its complete-by passes (an expiry, as for
// any step: retry = wait again with a new attempt, compensate, or fail).
// An agent's running attempt may be handed off instead (Defer): it stays
// RUNNING, deferred, no longer held by its agent, until its complete-by.
// Either is ended by CompleteFromOutside.

var (
	// ErrNotWaiting means a completion from outside named a step, or an
	// attempt, that is not waiting for one: not yet ready, already ended,
	// replaced by a later attempt, or running on an agent that did not
	// hand it off.
	ErrNotWaiting = errors.New("taskstate: step is not waiting for a completion")
	// ErrCompletedOtherwise means the step's attempt was already completed
	// from outside with another output or error.
	ErrCompletedOtherwise = errors.New("taskstate: step was completed otherwise")
	// ErrNotDeferrable means an agent asked to defer an execution that
	// cannot be handed off (a compensation).
	ErrNotDeferrable = errors.New("taskstate: execution cannot be deferred")
)

// WaitsExternal reports whether the step's current execution waits for a
// completion from outside instead of running on an agent: a forward
// execution of a step with wait_for "external" (its compensation, if any,
// runs on an agent).
func WaitsExternal(t *reevev1.Task, s *reevev1.Step) bool {
	return !s.GetCompensation() && workflow.WaitsExternal(Spec(t, s.GetName()))
}

// Awaiting reports whether the step's current execution may be completed
// from outside by name: it is WAITING for an external completion, or its
// agent deferred it.
func Awaiting(t *reevev1.Task, s *reevev1.Step) bool {
	switch {
	case Waiting(s):
		return WaitsExternal(t, s)
	case s.GetState() == reevev1.StepState_STEP_STATE_RUNNING:
		return s.GetDeferred()
	}
	return false
}

// startWait makes the step, whose new attempt was just counted, wait for a
// completion from outside when its spec says so, and reports whether it
// did. The step is WAITING from now until its complete-by (now plus its
// timeout), out of the ready queue; the task runs.
func startWait(t *reevev1.Task, s *reevev1.Step, now time.Time) bool {
	if !WaitsExternal(t, s) {
		return false
	}
	dequeue(s)
	s.State = reevev1.StepState_STEP_STATE_WAITING
	// The wait begins now: ready and due at once (a retry's backoff does
	// not apply, nothing runs), never dispatched (WAITING is not queued).
	s.ReadyTime = timestamppb.New(now)
	s.NotBefore = timestamppb.New(now)
	if s.GetStartTime() == nil {
		s.StartTime = timestamppb.New(now)
	}
	s.EndTime = nil
	s.WaitStartTime = timestamppb.New(now)
	by := now.Add(workflow.EffectiveTimeout(t.GetWorkflow(), Spec(t, s.GetName())))
	s.CompleteBy = timestamppb.New(by)
	if t.GetState() == reevev1.TaskState_TASK_STATE_PENDING {
		t.State = reevev1.TaskState_TASK_STATE_RUNNING
	}
	addHistory(t, now, "step.waiting", s.GetName(), s.GetAttempt(), "scheduler", "waiting for a completion from outside until "+by.UTC().Format(time.RFC3339Nano))
	return true
}

// Completion is a completion from outside (CompleteStep).
type Completion struct {
	// Attempt is the attempt the completion's token names; 0 for a
	// completion by name, which completes the step's current attempt.
	Attempt int32
	// Output, when Error is nil: the step succeeded with it.
	Output *structpb.Value
	// Error, when set: the step failed for good (code and message).
	Error *reevev1.StepError
	// Actor is who completed it, for the history.
	Actor string
}

// CompletionDigest is the SHA-256 by which a completion is recognized
// when it is sent again: of its output's deterministic encoding (so two
// JSON objects with their keys in another order are the same output), or
// of its error's code and message.
func CompletionDigest(c Completion) []byte {
	h := sha256.New()
	if c.Error != nil {
		h.Write([]byte("error\x00"))
		h.Write([]byte(c.Error.GetCode()))
		h.Write([]byte{0})
		h.Write([]byte(c.Error.GetMessage()))
		return h.Sum(nil)
	}
	h.Write([]byte("output\x00"))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.Output)
	if err != nil {
		panic(err) // a validated value always marshals
	}
	h.Write(b)
	return h.Sum(nil)
}

// Repeated reports whether c is a completion the step already recorded
// (the same output or error, for the same attempt): it is answered as the
// first was and changes nothing, whatever happened to the step and the
// task since. By name (Attempt 0) it is the step's last completion,
// unless the step waits again on a later attempt (a retry): that wait is
// completed instead.
func Repeated(t *reevev1.Task, s *reevev1.Step, c Completion) bool {
	if len(s.GetCompletionDigest()) == 0 || !bytes.Equal(s.GetCompletionDigest(), CompletionDigest(c)) {
		return false
	}
	if c.Attempt != 0 {
		return c.Attempt == s.GetCompletionAttempt()
	}
	return !(Awaiting(t, s) && s.GetAttempt() > s.GetCompletionAttempt()) || TerminalTask(t.GetState())
}

// CompleteFromOutside completes the named step's execution from outside
// (by its token, c.Attempt, or by name, the current attempt), after the
// caller found it not Repeated: the step succeeds with c.Output and the
// workflow advances, or it fails for good with c.Error (not retryable: the
// step's escalation applies, so a task with compensations is undone). It
// completes a WAITING step, a RUNNING one its agent deferred, and, by
// token only, a RUNNING one its agent still holds (the agent passed the
// token on before its deferral was recorded; it is told to stop). Anything
// else is refused and changes nothing: ErrNotWaiting (not ready yet,
// ended, or the attempt replaced), ErrCompletedOtherwise (already completed
// with another output or error), ErrTerminal.
func CompleteFromOutside(t *reevev1.Task, name string, c Completion, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	attempt := c.Attempt
	if attempt == 0 {
		attempt = s.GetAttempt()
	}
	exec := fmt.Sprintf("attempt %d of step %q", attempt, name)
	state := StateName(s.GetState())
	if len(s.GetCompletionDigest()) > 0 && attempt == s.GetCompletionAttempt() {
		return &refusal{ErrCompletedOtherwise, fmt.Sprintf("%s was already completed from outside (%s) with another output or error: this completion changes nothing", exec, StateName(s.GetCompletionState()))}
	}
	if TerminalTask(t.GetState()) {
		return &refusal{ErrTerminal, fmt.Sprintf("task %s is %s: step %q no longer waits for a completion", t.GetId(), StateName(t.GetState()), name)}
	}
	switch {
	case attempt < s.GetAttempt():
		return &refusal{ErrNotWaiting, fmt.Sprintf("%s was replaced: the step is at attempt %d (%s); this completion changes nothing", exec, s.GetAttempt(), state)}
	case attempt > s.GetAttempt():
		return &refusal{ErrNotWaiting, fmt.Sprintf("%s does not exist: the step is at attempt %d (%s)", exec, s.GetAttempt(), state)}
	case s.GetCompensation():
		return &refusal{ErrNotWaiting, fmt.Sprintf("step %q is being compensated (%s): only its forward execution is completed from outside", name, state)}
	case Awaiting(t, s):
	case c.Attempt != 0 && s.GetState() == reevev1.StepState_STEP_STATE_RUNNING:
		// By token while its agent still holds it: the agent passed the
		// token on, and the completion came before the deferral.
	case s.GetState() == reevev1.StepState_STEP_STATE_RUNNING:
		return &refusal{ErrNotWaiting, fmt.Sprintf("step %q is RUNNING on agent %s, which has not handed it off: it is completed from outside once deferred, or with its token", name, s.GetLockedByAgent())}
	case s.GetState() == reevev1.StepState_STEP_STATE_PENDING:
		return &refusal{ErrNotWaiting, fmt.Sprintf("step %q is not ready yet (PENDING): it waits for a completion once the steps it depends on succeeded", name)}
	case Sleeping(t, s):
		return &refusal{ErrNotWaiting, fmt.Sprintf("step %q is a sleep until %s: it ends by itself, not by a completion from outside", name, s.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano))}
	default:
		return &refusal{ErrNotWaiting, fmt.Sprintf("step %q is %s: it does not wait for a completion", name, state)}
	}
	s.CompletionDigest = CompletionDigest(c)
	s.CompletionAttempt = attempt
	if c.Error != nil {
		s.CompletionState = reevev1.StepState_STEP_STATE_FAILED
		e := proto.CloneOf(c.Error)
		e.NonRetryable = true
		failAttempt(t, s, e, c.Actor, now)
		return nil
	}
	s.CompletionState = reevev1.StepState_STEP_STATE_SUCCEEDED
	release(s)
	s.EndTime = timestamppb.New(now)
	s.State = reevev1.StepState_STEP_STATE_SUCCEEDED
	s.Output = c.Output
	addHistory(t, now, "step.succeeded", name, attempt, c.Actor, "completed from outside")
	advance(t, now)
	return nil
}

// Defer hands the execution ref, dispatched to agentID, off (an agent's
// StepResult.deferred): it stays RUNNING with its complete-by, deferred and
// held by no agent (no heartbeats, its agent's disconnect does not recover
// it), until it is completed from outside or its complete-by passes. A
// compensation cannot be deferred (ErrNotDeferrable).
func Defer(t *reevev1.Task, ref *reevev1.StepRef, agentID, reason string, now time.Time) error {
	s, err := current(t, ref, agentID)
	if err != nil {
		return err
	}
	if Compensating(s) {
		return &refusal{ErrNotDeferrable, fmt.Sprintf("attempt %d of step %q is a compensation: only a forward step is handed off", ref.GetAttempt(), ref.GetStep())}
	}
	s.Deferred = true
	s.LockedByAgent = ""
	s.LockedByScheduler = ""
	s.WaitStartTime = timestamppb.New(now)
	msg := "handed off until " + s.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano)
	if reason != "" {
		msg += ": " + reason
	}
	addHistory(t, now, "step.deferred", s.GetName(), s.GetAttempt(), "agent/"+agentID, msg)
	return nil
}

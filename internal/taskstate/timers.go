package taskstate

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Durable timers (issue 35, items 3 and 4). Three things wait for a time,
// with no agent and no process holding them: each is a key of the deadline
// index (store/index.go derives it from the record), which the supervisor
// leader reads O(due) and acts on through a scheduler's fenced RecoverSteps.
//
//   - A sleep step (StepSpec.sleep): when it becomes ready it is WAITING
//     with complete_by = ready time + sleep (its deadline key). When that
//     passes, its "recovery" is its success (Wake): output
//     {"slept": "<duration>"}, and the task advances.
//   - A delayed start (Task.start_time): the task is created PENDING with no
//     step ready; the key <start_time>/<ns>/<id>/@start/0 (StartMark) is in
//     the index until it starts. When it passes, StartTask makes its root
//     steps ready (their schedule-to-start timeouts count from then).
//   - A task deadline (Task.deadline, from task_timeout): the key
//     <deadline>/<ns>/<id>/@deadline/0 (DeadlineMark) while the task is
//     PENDING or RUNNING. When it passes, ExpireTask compensates the task
//     (when a step of its workflow declares a compensation) or fails it (an
//     alert is raised), whatever step it is in, paused or not (a paused
//     task's undo runs at once, as a cancel's); running attempts are
//     revoked as in a cancel.
//
// Marks start with '@', which no step name can (workflow.ValidateName), so
// a task-level key never names a step.

const (
	// StartMark is the step segment of a delayed start's deadline key.
	StartMark = "@start"
	// DeadlineMark is the step segment of a task deadline's key.
	DeadlineMark = "@deadline"
	// CodeTaskTimeout starts the reason of a task that passed its deadline.
	CodeTaskTimeout = "task_timeout"
)

const (
	// ActionWake ends a sleep step whose time passed: it succeeds. Sent as
	// RECOVERY_ACTION_RETRY (the step goes on).
	ActionWake Action = iota + 100
	// ActionStart starts a task whose start time passed. Sent as
	// RECOVERY_ACTION_RETRY.
	ActionStart
)

// TaskMark reports whether a deadline key's step segment is a task-level
// mark (StartMark, DeadlineMark) rather than a step name.
func TaskMark(step string) bool { return step == StartMark || step == DeadlineMark }

// NewAt is New for a submission with a start time and a task timeout: with
// start not zero (after now) the task waits to start, PENDING with no step
// ready, until StartTask; with timeout > 0 its deadline is its start (or
// now) plus timeout. New applies the workflow's task_timeout; NewAt's
// timeout, when > 0, is the submission's override.
func NewAt(namespace, id string, wf *reevev1.Workflow, input *structpb.Value, now, start time.Time, timeout time.Duration) *reevev1.Task {
	t := newTask(namespace, id, wf, input, now)
	if timeout <= 0 {
		timeout = wf.GetTaskTimeout().AsDuration()
	}
	base := now
	if start.After(now) {
		base = start
		t.StartTime = timestamppb.New(start)
		addHistory(t, now, "task.start_scheduled", "", 0, "client", "starts at "+start.UTC().Format(time.RFC3339Nano))
	} else {
		advance(t, now)
	}
	if timeout > 0 {
		t.Deadline = timestamppb.New(base.Add(timeout))
	}
	return t
}

// AwaitingStart reports whether the task waits for its start time (and
// when that is): PENDING, with a start time, and no step made ready yet.
func AwaitingStart(t *reevev1.Task) (time.Time, bool) {
	if t.GetState() != reevev1.TaskState_TASK_STATE_PENDING || t.GetStartTime() == nil {
		return time.Time{}, false
	}
	for _, s := range t.GetSteps() {
		if s.GetAttempt() > 0 || s.GetState() != reevev1.StepState_STEP_STATE_PENDING {
			return time.Time{}, false
		}
	}
	return t.GetStartTime().AsTime(), true
}

// TaskDeadline reports the task's deadline while it is in force: set, and
// the task PENDING or RUNNING (a COMPENSATING task is being undone; its
// compensations' own timeouts bound it).
func TaskDeadline(t *reevev1.Task) (time.Time, bool) {
	switch t.GetState() {
	case reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING:
		if d := t.GetDeadline(); d != nil {
			return d.AsTime(), true
		}
	}
	return time.Time{}, false
}

// Sleeping reports whether the step is a sleep step waiting for its time.
func Sleeping(t *reevev1.Task, s *reevev1.Step) bool {
	return Waiting(s) && workflow.IsSleep(Spec(t, s.GetName()))
}

// startSleep makes a sleep step that became ready WAITING until now plus
// its sleep; it reports false for any other step.
func startSleep(t *reevev1.Task, s *reevev1.Step, now time.Time) bool {
	spec := Spec(t, s.GetName())
	if !workflow.IsSleep(spec) {
		return false
	}
	until := now.Add(spec.GetSleep().AsDuration())
	s.State = reevev1.StepState_STEP_STATE_WAITING
	s.ReadyTime = timestamppb.New(now)
	s.StartTime = timestamppb.New(now)
	s.CompleteBy = timestamppb.New(until)
	if t.GetState() == reevev1.TaskState_TASK_STATE_PENDING {
		t.State = reevev1.TaskState_TASK_STATE_RUNNING // a task whose step sleeps runs
	}
	addHistory(t, now, "step.sleeping", s.GetName(), s.GetAttempt(), "scheduler", "until "+until.UTC().Format(time.RFC3339Nano))
	return true
}

// DecideTimer is the supervisor's decision for a deadline key that is a
// timer: a sleeping step wakes (ActionWake), a task waiting to start starts
// (ActionStart), a task past its deadline is compensated when its workflow
// declares a compensation, else failed. ok is false for any other key (the
// step's policy decides: Decide).
func DecideTimer(t *reevev1.Task, step string) (Action, bool) {
	switch step {
	case StartMark:
		return ActionStart, true
	case DeadlineMark:
		for _, sp := range t.GetWorkflow().GetSteps() {
			if sp.GetCompensation() != nil {
				return ActionCompensate, true
			}
		}
		return ActionFail, true
	}
	if s := FindStep(t, step); s != nil && Sleeping(t, s) {
		return ActionWake, true
	}
	return 0, false
}

// Wake ends the sleep of step (name, attempt), due by now: the step
// SUCCEEDS with the output {"slept": "<its sleep>"} and the task advances.
func Wake(t *reevev1.Task, name string, attempt int32, actor string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return &refusal{ErrTerminal, fmt.Sprintf("task %s is %s: nothing of it is left to wake", t.GetId(), StateName(t.GetState()))}
	}
	s := FindStep(t, name)
	if s == nil {
		return &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	if !Sleeping(t, s) || s.GetAttempt() != attempt {
		return &refusal{ErrStale, fmt.Sprintf("attempt %d of step %q is not a sleep in progress: the step is %s at attempt %d", attempt, name, StateName(s.GetState()), s.GetAttempt())}
	}
	until := s.GetCompleteBy().AsTime()
	if now.Before(until) {
		return &refusal{ErrNotExpired, fmt.Sprintf("step %q sleeps until %s", name, until.UTC().Format(time.RFC3339Nano))}
	}
	slept := Spec(t, name).GetSleep().AsDuration()
	release(s)
	s.State = reevev1.StepState_STEP_STATE_SUCCEEDED
	s.EndTime = timestamppb.New(now)
	s.Output = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"slept": structpb.NewStringValue(slept.String())}})
	addHistory(t, now, "step.succeeded", name, attempt, actor, "slept "+slept.String())
	advance(t, now)
	return nil
}

// StartTask starts a task whose start time passed: its root steps become
// ready now.
func StartTask(t *reevev1.Task, actor string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return &refusal{ErrTerminal, fmt.Sprintf("task %s is %s: it will not start", t.GetId(), StateName(t.GetState()))}
	}
	at, ok := AwaitingStart(t)
	if !ok {
		return &refusal{ErrStale, fmt.Sprintf("task %s is not waiting to start (it is %s)", t.GetId(), StateName(t.GetState()))}
	}
	if now.Before(at) {
		return &refusal{ErrNotExpired, fmt.Sprintf("task %s starts at %s", t.GetId(), at.UTC().Format(time.RFC3339Nano))}
	}
	addHistory(t, now, "task.started", "", 0, actor, "start time "+at.UTC().Format(time.RFC3339Nano)+" reached")
	advance(t, now)
	return nil
}

// ExpireTask applies action (ActionCompensate or ActionFail) to a task past
// its deadline: whatever its steps are doing, running and queued
// executions are canceled (their agents revoked) and the task is
// compensated, or failed (an alert). reason, when empty, says
// "task_timeout: ...".
func ExpireTask(t *reevev1.Task, action Action, reason, actor string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return &refusal{ErrTerminal, fmt.Sprintf("task %s is %s: its deadline no longer applies", t.GetId(), StateName(t.GetState()))}
	}
	at, ok := TaskDeadline(t)
	if !ok {
		return &refusal{ErrStale, fmt.Sprintf("task %s has no deadline in force (it is %s)", t.GetId(), StateName(t.GetState()))}
	}
	by := at.UTC().Format(time.RFC3339Nano)
	if now.Before(at) {
		return &refusal{ErrNotExpired, fmt.Sprintf("task %s has until %s", t.GetId(), by)}
	}
	if reason == "" {
		reason = CodeTaskTimeout + ": the task did not end by its deadline " + by
	}
	addHistory(t, now, "task.timed_out", "", 0, actor, reason)
	switch action {
	case ActionCompensate:
		t.Paused = false // the undo the deadline asks for runs at once, as a cancel's
		startCompensation(t, reason, actor, now)
	case ActionFail:
		failTask(t, reason, actor, now)
	default:
		return fmt.Errorf("taskstate: a task deadline is compensated or failed, not %v", action)
	}
	return nil
}

// rerunDeadline gives a rerun the task timeout the old task had (the
// submission's task_timeout, else the workflow's: its deadline less its
// start or creation) from its own creation; a rerun is a new task, it
// starts now and does not inherit the old one's start time or deadline.
// An old task with no deadline (none, or one an operator's retry dropped)
// gives the workflow's task_timeout.
func rerunDeadline(t, old *reevev1.Task, now time.Time) {
	var timeout time.Duration
	if d := t.GetWorkflow().GetTaskTimeout(); d != nil {
		timeout = d.AsDuration()
	}
	if d := old.GetDeadline(); d != nil {
		base := old.GetCreateTime()
		if st := old.GetStartTime(); st != nil {
			base = st
		}
		if base != nil && d.AsTime().After(base.AsTime()) {
			timeout = d.AsTime().Sub(base.AsTime())
		}
	}
	if timeout > 0 {
		t.Deadline = timestamppb.New(now.Add(timeout))
	}
}

// dropPassedDeadline clears a deadline that passed, when an operator's
// retry_step takes a FAILED task back to RUNNING: the deadline did its
// work (it failed the task, or the task failed before it), and kept it
// would fail the task again at once. The history says so.
func dropPassedDeadline(t *reevev1.Task, actor string, now time.Time) {
	if d := t.GetDeadline(); d != nil && !now.Before(d.AsTime()) {
		t.Deadline = nil
		addHistory(t, now, "task.deadline_cleared", "", 0, actor, "the deadline "+d.AsTime().UTC().Format(time.RFC3339Nano)+" passed; the retried task has none")
	}
}

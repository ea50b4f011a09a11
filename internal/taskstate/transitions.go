package taskstate

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

var (
	// ErrStale means the named execution is not the step's current, dispatched
	// one (another attempt, another agent, or the step already moved on).
	ErrStale = errors.New("taskstate: stale attempt")
	// ErrNotQueued means the step is not waiting in the ready queue with that
	// attempt (another scheduler claimed it, or it moved on).
	ErrNotQueued = errors.New("taskstate: step is not queued")
	// ErrNotDue means the step is queued but backing off until not_before.
	ErrNotDue = errors.New("taskstate: step is backing off")
	// ErrTerminal means the task already reached a terminal state.
	ErrTerminal = errors.New("taskstate: task is terminal")
	// ErrUnknownStep means the task has no step of that name.
	ErrUnknownStep = errors.New("taskstate: unknown step")
	// ErrUndoing means a cancel that undoes found the task already being
	// undone (COMPENSATING): it changes nothing.
	ErrUndoing = errors.New("taskstate: task is being compensated")
)

// MaxHistory is how many history events a task keeps; older ones are dropped
// and counted in Task.history_dropped.
const MaxHistory = 200

// New returns a PENDING task running wf, with its root steps queued (and
// the workflow's task_timeout as its deadline: NewAt).
func New(namespace, id string, wf *reevev1.Workflow, input *structpb.Value, now time.Time) *reevev1.Task {
	return NewAt(namespace, id, wf, input, now, time.Time{}, 0)
}

// newTask is a PENDING task running wf, submitted now, no step ready yet.
func newTask(namespace, id string, wf *reevev1.Workflow, input *structpb.Value, now time.Time) *reevev1.Task {
	t := &reevev1.Task{
		Namespace:  namespace,
		Id:         id,
		Workflow:   wf,
		State:      reevev1.TaskState_TASK_STATE_PENDING,
		Input:      input,
		CreateTime: timestamppb.New(now),
		UpdateTime: timestamppb.New(now),
	}
	for _, sp := range wf.GetSteps() {
		t.Steps = append(t.Steps, &reevev1.Step{
			Name:           sp.GetName(),
			Type:           sp.GetType(),
			State:          reevev1.StepState_STEP_STATE_PENDING,
			IdempotencyKey: IdempotencyKey(namespace, id, sp.GetName()),
		})
	}
	addHistory(t, now, "task.submitted", "", 0, "client", "")
	return t
}

// IdempotencyKey is the key passed with every attempt of a step; the
// compensation uses the same key with a ":compensate" suffix.
func IdempotencyKey(namespace, taskID, step string) string {
	return namespace + "/" + taskID + "/" + step
}

// Claim dispatches the queued execution (name, attempt) to agentID through
// schedulerID: the step becomes RUNNING (or its compensation dispatched) with
// a complete-by of now plus the step's timeout.
func Claim(t *reevev1.Task, name string, attempt int32, schedulerID, agentID string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return ErrTerminal
	}
	s := FindStep(t, name)
	if s == nil {
		return &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	if !Queued(s) || s.GetAttempt() != attempt {
		return ErrNotQueued
	}
	if t.GetPaused() {
		return ErrPaused
	}
	if nb := s.GetNotBefore(); nb != nil && now.Before(nb.AsTime()) {
		return ErrNotDue
	}
	spec := Spec(t, name)
	timeout := workflow.EffectiveTimeout(t.GetWorkflow(), spec)
	kind := "step.dispatched"
	if Compensating(s) {
		timeout = workflow.CompensationTimeout(t.GetWorkflow(), spec)
		kind = "compensation.dispatched"
	} else {
		s.State = reevev1.StepState_STEP_STATE_RUNNING
	}
	if s.GetStartTime() == nil {
		s.StartTime = timestamppb.New(now)
	}
	s.CompleteBy = timestamppb.New(now.Add(timeout))
	s.ScheduleToStartDeadline = nil
	s.LockedByScheduler = schedulerID
	s.LockedByAgent = agentID
	s.Slot, s.SlotLimit, s.KeySlot, s.SlotDeadline = 0, 0, 0, false // the claimer sets the slots it took, if any (issue 36)
	if t.GetState() == reevev1.TaskState_TASK_STATE_PENDING {
		t.State = reevev1.TaskState_TASK_STATE_RUNNING
	}
	addHistory(t, now, kind, name, attempt, "scheduler/"+schedulerID, "agent "+agentID)
	return nil
}

// Complete records a successful result of the execution ref from agentID and
// advances the workflow: dependents become ready, the task may succeed, or a
// compensation finishes and the next one starts.
func Complete(t *reevev1.Task, ref *reevev1.StepRef, agentID string, output *structpb.Value, now time.Time) error {
	s, err := current(t, ref, agentID)
	if err != nil {
		return err
	}
	release(s)
	s.EndTime = timestamppb.New(now)
	if Compensating(s) {
		s.State = reevev1.StepState_STEP_STATE_COMPENSATED
		addHistory(t, now, "compensation.succeeded", s.GetName(), s.GetAttempt(), "agent/"+agentID, "")
		advanceCompensation(t, now)
		return nil
	}
	s.State = reevev1.StepState_STEP_STATE_SUCCEEDED
	s.Output = output
	addHistory(t, now, "step.succeeded", s.GetName(), s.GetAttempt(), "agent/"+agentID, "")
	advance(t, now)
	return nil
}

// Fail records a failed result of the execution ref from agentID: the step is
// retried after its backoff while its policy allows, else it escalates
// (NextAttempt decides).
func Fail(t *reevev1.Task, ref *reevev1.StepRef, agentID string, stepErr *reevev1.StepError, now time.Time) error {
	s, err := current(t, ref, agentID)
	if err != nil {
		return err
	}
	failAttempt(t, s, stepErr, "agent/"+agentID, now)
	return nil
}

// Cancel ends a non-terminal task at a client's or an operator's request.
//
// With undo, a task that holds work to undo (a succeeded step that declares
// a compensation, or an interrupted compensation: needsUndo) is compensated
// instead of dropped half done, as a saga's user expects: steps not started
// are skipped, running executions are canceled (their agents are told
// through Revoked) and the succeeded steps are undone in reverse dependency
// order. It ends COMPENSATED when every undo succeeded (FAILED with an
// alert when one cannot be), with the reason "canceled: <reason>"; the
// history's task.compensating event names who canceled. A COMPENSATING task
// is already being undone: the cancel changes nothing (ErrUndoing).
//
// Without undo, or with nothing to undo, the task ends CANCELED at once. A
// CANCELED task that still holds work to undo (LeftToUndo) can be
// compensated later (Compensate).
func Cancel(t *reevev1.Task, reason, actor string, undo bool, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return ErrTerminal
	}
	if undo {
		if t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATING {
			return ErrUndoing
		}
		if LeftToUndo(t) {
			t.Paused = false // the undo asked for runs at once
			startCompensation(t, "canceled: "+reason, actor, now)
			return nil
		}
	}
	stopSteps(t, now)
	t.Reason = reason
	endTask(t, reevev1.TaskState_TASK_STATE_CANCELED, now)
	addHistory(t, now, "task.canceled", "", 0, actor, reason)
	return nil
}

// current returns the step named by ref if ref is its dispatched execution
// held by agentID. A refusal says what happened, for the agent's ResultAck:
// an unknown step, a superseded or never-made attempt, one held by another
// agent, one never dispatched, or a result already recorded.
func current(t *reevev1.Task, ref *reevev1.StepRef, agentID string) (*reevev1.Step, error) {
	name, attempt := ref.GetStep(), ref.GetAttempt()
	s := FindStep(t, name)
	if s == nil {
		return nil, &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	state := StateName(s.GetState())
	exec := fmt.Sprintf("attempt %d of step %q", attempt, name)
	switch {
	case attempt < s.GetAttempt():
		return nil, &refusal{ErrStale, fmt.Sprintf("%s was superseded: the step is at attempt %d (%s); this result changes nothing", exec, s.GetAttempt(), state)}
	case attempt > s.GetAttempt():
		return nil, &refusal{ErrStale, fmt.Sprintf("%s does not exist: the step is at attempt %d (%s)", exec, s.GetAttempt(), state)}
	case s.GetDeferred():
		return nil, &refusal{ErrStale, fmt.Sprintf("%s was handed off (deferred): it is completed with its completion token, not by an agent's result", exec)}
	case Dispatched(s) && s.GetLockedByAgent() != agentID:
		return nil, &refusal{ErrStale, fmt.Sprintf("%s is held by agent %s, not %s", exec, s.GetLockedByAgent(), agentID)}
	case Dispatched(s) && !TerminalTask(t.GetState()):
		return s, nil
	case Queued(s):
		return nil, &refusal{ErrStale, fmt.Sprintf("%s was never dispatched: it is %s, queued for an agent", exec, state)}
	case s.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED || s.GetState() == reevev1.StepState_STEP_STATE_COMPENSATED:
		return nil, &refusal{ErrStale, fmt.Sprintf("%s already %s: a result for it was accepted before (a duplicate)", exec, state)}
	case TerminalTask(t.GetState()):
		return nil, &refusal{ErrStale, fmt.Sprintf("%s is %s and task %s is %s: the result came too late", exec, state, t.GetId(), StateName(t.GetState()))}
	}
	return nil, &refusal{ErrStale, fmt.Sprintf("%s is not dispatched: the step is %s", exec, state)}
}

// refusal is an error whose message is for the agent or operator, without
// the package prefix of the sentinel it matches.
type refusal struct {
	sentinel error
	msg      string
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == e.sentinel }

// failAttempt records the failure of the step's current execution and
// applies NextAttempt's decision: the next attempt after its delay, or the
// escalation.
func failAttempt(t *reevev1.Task, s *reevev1.Step, stepErr *reevev1.StepError, actor string, now time.Time) {
	d := NextAttempt(t, s, CauseFailure, stepErr)
	kind := "step.failed"
	if Compensating(s) {
		kind = "compensation.failed"
	}
	release(s)
	s.LastError = stepErr
	s.FailureCount++
	addHistory(t, now, kind, s.GetName(), s.GetAttempt(), actor, ErrorText(stepErr))
	if !d.Escalated {
		requeue(t, s, now, d.Delay)
		addHistory(t, now, "step.retry_scheduled", s.GetName(), s.GetAttempt(), actor, "not before "+s.GetNotBefore().AsTime().UTC().Format(time.RFC3339Nano))
		return
	}
	escalate(t, s, d, actor, now)
}

// escalate applies the escalation d names for step s, whose failure is
// recorded: a new round after escalation_wait (wait_then_retry), the task
// compensated, or the task failed (always for a compensation).
func escalate(t *reevev1.Task, s *reevev1.Step, d RetryDecision, actor string, now time.Time) {
	reason := EscalationReason(t, s)
	switch d.Action {
	case ActionRetry:
		s.FailureCount = d.Failures
		requeue(t, s, now, d.Delay)
		addHistory(t, now, "step.escalated", s.GetName(), s.GetAttempt(), actor, "wait_then_retry until "+s.GetNotBefore().AsTime().UTC().Format(time.RFC3339Nano))
	case ActionCompensate:
		s.State = reevev1.StepState_STEP_STATE_FAILED
		s.EndTime = timestamppb.New(now)
		addHistory(t, now, "step.escalated", s.GetName(), s.GetAttempt(), actor, "compensate")
		startCompensation(t, reason, actor, now)
	default:
		s.State = reevev1.StepState_STEP_STATE_FAILED
		s.EndTime = timestamppb.New(now)
		failTask(t, reason, actor, now)
	}
}

// requeue makes the step's next attempt ready no earlier than now+delay.
func requeue(t *reevev1.Task, s *reevev1.Step, now time.Time, delay time.Duration) {
	if s.GetState() == reevev1.StepState_STEP_STATE_RUNNING || Waiting(s) {
		s.State = reevev1.StepState_STEP_STATE_PENDING
	}
	s.Attempt++
	if !KeyWaiting(t) && (startSleep(t, s, now) || startWait(t, s, now)) { // timers.go, wait.go: sleep or wait again
		return
	}
	enqueue(t, s, now, now.Add(delay))
}

// enqueue puts the step's current execution in the ready queue: ready since
// now, not dispatched before notBefore (zero: at once), and, when the step
// has a schedule-to-start timeout, handed to the supervisor if no agent
// claimed it that long after it became due.
func enqueue(t *reevev1.Task, s *reevev1.Step, now, notBefore time.Time) {
	s.ReadyTime = timestamppb.New(now)
	s.NotBefore = nil
	due := now
	if !notBefore.IsZero() {
		s.NotBefore = timestamppb.New(notBefore)
		due = later(now, notBefore)
	}
	s.ScheduleToStartDeadline = nil
	if d := ScheduleToStart(t, s); d > 0 {
		s.ScheduleToStartDeadline = timestamppb.New(due.Add(d))
	}
}

// dequeue takes a step that never ran out of the ready queue.
func dequeue(s *reevev1.Step) {
	s.ReadyTime = nil
	s.NotBefore = nil
	s.ScheduleToStartDeadline = nil
}

func release(s *reevev1.Step) {
	s.CompleteBy = nil
	s.LockedByAgent = ""
	s.LockedByScheduler = ""
	s.Deferred = false
	s.WaitStartTime = nil
}

func markReady(t *reevev1.Task, s *reevev1.Step, now time.Time) {
	s.Attempt++
	// A task waiting for its workflow key's slot starts no wait or sleep
	// either: StartWaits starts them once it has the slot (flow.go).
	if !KeyWaiting(t) && (startSleep(t, s, now) || startWait(t, s, now)) { // timers.go, wait.go
		return
	}
	enqueue(t, s, now, time.Time{})
	addHistory(t, now, "step.ready", s.GetName(), s.GetAttempt(), "scheduler", "")
}

// advance queues every step whose dependencies all succeeded and ends the
// task when every step succeeded.
func advance(t *reevev1.Task, now time.Time) {
	done := 0
	for _, s := range t.GetSteps() {
		switch {
		case s.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED:
			done++
		case s.GetState() == reevev1.StepState_STEP_STATE_PENDING && s.GetReadyTime() == nil && depsSucceeded(t, s.GetName()):
			markReady(t, s, now)
		}
	}
	if done == len(t.GetSteps()) {
		endTask(t, reevev1.TaskState_TASK_STATE_SUCCEEDED, now)
		addHistory(t, now, "task.succeeded", "", 0, "scheduler", "")
	}
}

func depsSucceeded(t *reevev1.Task, name string) bool {
	for _, dep := range Spec(t, name).GetDependsOn() {
		if FindStep(t, dep).GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
			return false
		}
	}
	return true
}

func failTask(t *reevev1.Task, reason, actor string, now time.Time) {
	stopSteps(t, now)
	t.Reason = reason
	endTask(t, reevev1.TaskState_TASK_STATE_FAILED, now)
	addHistory(t, now, "task.failed", "", 0, actor, reason)
}

// stopSteps skips steps that never started and cancels dispatched or queued
// executions.
func stopSteps(t *reevev1.Task, now time.Time) {
	for _, s := range t.GetSteps() {
		switch s.GetState() {
		case reevev1.StepState_STEP_STATE_PENDING:
			if s.GetStartTime() == nil {
				s.State = reevev1.StepState_STEP_STATE_SKIPPED
			} else {
				s.State = reevev1.StepState_STEP_STATE_CANCELED
				s.EndTime = timestamppb.New(now)
			}
		case reevev1.StepState_STEP_STATE_RUNNING, reevev1.StepState_STEP_STATE_COMPENSATING, reevev1.StepState_STEP_STATE_WAITING:
			s.State = reevev1.StepState_STEP_STATE_CANCELED
			s.EndTime = timestamppb.New(now)
		default:
			continue
		}
		release(s)
		dequeue(s)
	}
}

// startCompensation undoes the task: what has not run is skipped, what runs
// is canceled, and succeeded steps are compensated in reverse dependency order.
func startCompensation(t *reevev1.Task, reason, actor string, now time.Time) {
	stopSteps(t, now)
	t.State = reevev1.TaskState_TASK_STATE_COMPENSATING
	t.Reason = reason
	addHistory(t, now, "task.compensating", "", 0, actor, reason)
	advanceCompensation(t, now)
}

// advanceCompensation starts the compensation of every succeeded step none of
// whose dependents still needs undoing, and ends the task when nothing is left.
func advanceCompensation(t *reevev1.Task, now time.Time) {
	waiting := upstreamOfUndo(t)
	pending := 0
	for _, s := range t.GetSteps() {
		switch {
		case Compensating(s):
			pending++
		case needsUndo(t, s):
			pending++
			if waiting[s.GetName()] {
				continue
			}
			s.State = reevev1.StepState_STEP_STATE_COMPENSATING
			s.Compensation = true
			s.FailureCount = 0
			s.LastError = nil
			s.HeartbeatDetails = nil // the step's progress, not its compensation's
			s.EndTime = nil
			s.Attempt++
			enqueue(t, s, now, time.Time{})
			addHistory(t, now, "compensation.ready", s.GetName(), s.GetAttempt(), "scheduler", "")
		}
	}
	if pending == 0 {
		endTask(t, reevev1.TaskState_TASK_STATE_COMPENSATED, now)
		addHistory(t, now, "task.compensated", "", 0, "scheduler", "")
	}
}

// needsUndo reports whether the step's success still has to be undone: it
// SUCCEEDED and declares a compensation, or its compensation started and was
// canceled before it was confirmed (FailTask or CancelTask interrupted it), so
// the undo may or may not have happened and must run again (with the same
// idempotency key).
func needsUndo(t *reevev1.Task, s *reevev1.Step) bool {
	if Spec(t, s.GetName()).GetCompensation() == nil {
		return false
	}
	switch s.GetState() {
	case reevev1.StepState_STEP_STATE_SUCCEEDED:
		return true
	case reevev1.StepState_STEP_STATE_CANCELED:
		return s.GetCompensation()
	}
	return false
}

// upstreamOfUndo returns the steps upstream, directly or through any chain
// of dependencies (also through steps without a compensation), of a step
// that still needs to be, or is being, compensated: their own compensation
// must wait, so that undo is strictly reverse-topological. Linear in the
// workflow's size.
func upstreamOfUndo(t *reevev1.Task) map[string]bool {
	deps := map[string][]string{}
	for _, sp := range t.GetWorkflow().GetSteps() {
		deps[sp.GetName()] = sp.GetDependsOn()
	}
	seen := map[string]bool{}
	var frontier []string
	for _, s := range t.GetSteps() {
		if Compensating(s) || needsUndo(t, s) {
			frontier = append(frontier, s.GetName())
		}
	}
	for len(frontier) > 0 {
		n := frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		for _, d := range deps[n] {
			if !seen[d] {
				seen[d] = true
				frontier = append(frontier, d)
			}
		}
	}
	return seen
}

// Downstream lists every step that depends on name, directly or
// transitively, in the workflow's order.
func Downstream(t *reevev1.Task, name string) []string {
	children := map[string][]string{}
	for _, sp := range t.GetWorkflow().GetSteps() {
		for _, d := range sp.GetDependsOn() {
			children[d] = append(children[d], sp.GetName())
		}
	}
	return reach(t, name, func(n string) []string { return children[n] })
}

// Upstream lists every step name depends on, directly or transitively, in
// the workflow's order.
func Upstream(t *reevev1.Task, name string) []string {
	deps := map[string][]string{}
	for _, sp := range t.GetWorkflow().GetSteps() {
		deps[sp.GetName()] = sp.GetDependsOn()
	}
	return reach(t, name, func(n string) []string { return deps[n] })
}

// reach lists the steps reachable from name through next, in the
// workflow's order.
func reach(t *reevev1.Task, name string, next func(string) []string) []string {
	seen := map[string]bool{name: true}
	frontier := []string{name}
	for len(frontier) > 0 {
		n := frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		for _, m := range next(n) {
			if !seen[m] {
				seen[m] = true
				frontier = append(frontier, m)
			}
		}
	}
	var out []string
	for _, sp := range t.GetWorkflow().GetSteps() {
		if seen[sp.GetName()] && sp.GetName() != name {
			out = append(out, sp.GetName())
		}
	}
	return out
}

func endTask(t *reevev1.Task, state reevev1.TaskState, now time.Time) {
	t.State = state
	t.EndTime = timestamppb.New(now)
	t.Paused = false
}

func addHistory(t *reevev1.Task, now time.Time, kind, step string, attempt int32, actor, msg string) {
	t.UpdateTime = timestamppb.New(now)
	t.History = append(t.History, &reevev1.HistoryEvent{
		Time: timestamppb.New(now), Kind: kind, Step: step, Attempt: attempt, Actor: actor, Message: msg,
	})
	if over := len(t.History) - MaxHistory; over > 0 {
		t.History = append(t.History[:0:0], t.History[over:]...)
		t.HistoryDropped += int32(over)
	}
}

package taskstate_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The model-based test of the state machine: a seeded random walk drives a
// random DAG workflow through claims, results (success, retryable and
// permanent failures; late, duplicate and wrong-agent ones), expiries and the
// supervisor's decisions, heartbeats missed, and every operator action at
// every point, and checks the invariants after every event against a ghost
// model of what was accepted. Only a FAILED task may leave its terminal
// state (an operator's retry or compensation).

// modelCases is how many walks TestStateMachineModel takes: thousands in
// seconds. FuzzStateMachineModel explores further under `make fuzz`.
const modelCases = 3000

func TestStateMachineModel(t *testing.T) {
	for seed := range uint64(modelCases) {
		if err := walk(seed, seed*0x9e3779b97f4a7c15); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func FuzzStateMachineModel(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, seed*31)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		if err := walk(a, b); err != nil {
			t.Fatal(err)
		}
	})
}

// execution is one dispatch the walk saw: its results may come back at any
// later point, late or twice.
type execution struct {
	step         string
	attempt      int32
	agent        string
	compensation bool
}

type model struct {
	r    *rand.Rand
	task *reevev1.Task
	now  time.Time
	log  []string

	sent []execution
	// Ghost state, from what the state machine accepted.
	succeeded map[string]int  // accepted forward successes
	undone    map[string]int  // accepted compensations
	live      map[string]int  // successes not undone yet (steps with a compensation)
	compSent  map[string]bool // a compensation was dispatched since the step last succeeded
}

func walk(a, b uint64) (err error) {
	r := rand.New(rand.NewPCG(a, b))
	m := &model{
		r: r, now: t0,
		succeeded: map[string]int{}, undone: map[string]int{}, live: map[string]int{}, compSent: map[string]bool{},
	}
	wf := randomWorkflow(r)
	if err := workflow.ValidateWorkflow("workflow", wf, true); err != nil {
		return fmt.Errorf("generated an invalid workflow: %v", err)
	}
	m.task = taskstate.New("default", "t-1", wf, nil, t0)
	if r.IntN(5) == 0 { // a delayed start (issue 35)
		m.task = taskstate.NewAt("default", "t-1", wf, nil, t0, t0.Add(time.Duration(1+r.IntN(120))*time.Second), 0)
	}
	defer func() {
		if err != nil {
			tail := m.log[max(0, len(m.log)-25):]
			err = fmt.Errorf("%w\nworkflow: %s\nlast events:\n  %s\nsteps: %v", err, describe(wf), strings.Join(tail, "\n  "), states(m.task))
		}
	}()
	if err := m.check(); err != nil {
		return err
	}
	limit := 40 + 12*len(wf.GetSteps())
	afterEnd := 0
	for range limit {
		if taskstate.TerminalTask(m.task.GetState()) {
			if afterEnd++; afterEnd > 6 {
				return nil
			}
		}
		if err := m.event(); err != nil {
			return err
		}
		if err := m.check(); err != nil {
			return err
		}
	}
	return nil
}

func randomWorkflow(r *rand.Rand) *reevev1.Workflow {
	n := 1 + r.IntN(8)
	if r.IntN(20) == 0 {
		n = 1 + r.IntN(workflow.MaxSteps)
	}
	withComp := r.IntN(4) != 0
	chain := r.IntN(3) == 0 // long paths, through steps with and without a compensation
	policy := func() *reevev1.RetryPolicy {
		return &reevev1.RetryPolicy{MaxAttempts: int32(1 + r.IntN(3)), InitialBackoff: durationpb.New(time.Duration(1+r.IntN(3)) * time.Second)}
	}
	wf := &reevev1.Workflow{Name: "model", DefaultRetryPolicy: policy()}
	if r.IntN(2) == 0 {
		wf.DefaultScheduleToStartTimeout = durationpb.New(time.Minute)
	}
	for i := range n {
		sp := &reevev1.StepSpec{Name: fmt.Sprintf("s%d", i), Type: "t", Timeout: durationpb.New(10 * time.Second)}
		for j := range i {
			if chain && j == i-1 || !chain && r.IntN(max(1, i)) < 2 && r.IntN(3) != 0 {
				sp.DependsOn = append(sp.DependsOn, fmt.Sprintf("s%d", j))
			}
		}
		if withComp && r.IntN(3) != 0 {
			sp.Compensation = &reevev1.CompensationSpec{Type: "undo", RetryPolicy: policy()}
		}
		if r.IntN(2) == 0 {
			sp.RetryPolicy = policy()
		}
		if r.IntN(5) == 0 { // completed from outside (wait.go)
			sp.Type, sp.WaitFor = "", workflow.WaitExternal
		}
		switch r.IntN(4) {
		case 0:
			sp.Escalation = reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY
			sp.EscalationWait = durationpb.New(time.Minute)
		case 1, 2:
			sp.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
		}
		if r.IntN(6) == 0 { // a durable timer (issue 35): no agent, no policy
			sp = &reevev1.StepSpec{Name: sp.GetName(), DependsOn: sp.GetDependsOn(), Sleep: durationpb.New(time.Duration(1+r.IntN(60)) * time.Second)}
		}
		wf.Steps = append(wf.Steps, sp)
	}
	if r.IntN(4) == 0 {
		wf.TaskTimeout = durationpb.New(time.Duration(10+r.IntN(300)) * time.Second)
	}
	hasComp := slices.ContainsFunc(wf.Steps, func(sp *reevev1.StepSpec) bool { return sp.GetCompensation() != nil })
	for _, sp := range wf.Steps {
		if !hasComp && sp.Escalation == reevev1.Escalation_ESCALATION_COMPENSATE {
			sp.Escalation = reevev1.Escalation_ESCALATION_FAIL
		}
	}
	return wf
}

func describe(wf *reevev1.Workflow) string {
	var parts []string
	for _, sp := range wf.GetSteps() {
		p := sp.GetName()
		if len(sp.GetDependsOn()) > 0 {
			p += "<-" + strings.Join(sp.GetDependsOn(), ",")
		}
		if sp.GetCompensation() != nil {
			p += "[comp]"
		}
		p += "/" + strings.TrimPrefix(sp.GetEscalation().String(), "ESCALATION_")
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%s ", m.now.Sub(t0))+fmt.Sprintf(format, args...))
}

// event applies one random event. A transition that returns an error must
// leave the task exactly as it was.
func (m *model) event() error {
	before := proto.Clone(m.task).(*reevev1.Task)
	var err error
	var what string
	switch k := m.r.IntN(100); {
	case k < 8:
		what, err = m.outside()
	case k < 11:
		what, err = m.deferral()
	case k < 35:
		what, err = m.claim()
	case k < 70:
		what, err = m.result()
	case k < 82:
		what, err = m.supervise()
	case k < 86:
		what = "heartbeat missed"
		if s := m.pick(taskstate.Dispatched); s != nil {
			what = fmt.Sprintf("heartbeat missed %s#%d", s.GetName(), s.GetAttempt())
			err = taskstate.ExpireNow(m.task, s.GetName(), s.GetAttempt(), "scheduler/s1", m.now)
		}
	case k < 90:
		what, err = m.dropped()
	default:
		what, err = m.operator()
	}
	m.logf("%s -> %v (task %s)", what, err, taskstate.StateName(m.task.GetState()))
	// Only a FAILED task, or a CANCELED one with work left to undo
	// (compensate_task), comes back.
	if final := before.GetState(); final != reevev1.TaskState_TASK_STATE_FAILED && taskstate.TerminalTask(final) && m.task.GetState() != final &&
		!(final == reevev1.TaskState_TASK_STATE_CANCELED && taskstate.LeftToUndo(before) && m.task.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATING) {
		return violation("%s revived a %s task: it is %s", what, taskstate.StateName(final), taskstate.StateName(m.task.GetState()))
	}
	if errors.Is(err, errViolation) {
		return err
	}
	if err != nil && !proto.Equal(before, m.task) {
		return fmt.Errorf("%s was refused (%v) but changed the task", what, err)
	}
	return nil
}

// pick returns a random step for which ok holds, or nil.
func (m *model) pick(ok func(*reevev1.Step) bool) *reevev1.Step {
	var c []*reevev1.Step
	for _, s := range m.task.GetSteps() {
		if ok(s) {
			c = append(c, s)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[m.r.IntN(len(c))]
}

func (m *model) claim() (string, error) {
	s := m.pick(taskstate.Queued)
	if s == nil {
		return "claim: nothing queued", nil
	}
	if nb := s.GetNotBefore(); nb != nil && m.now.Before(nb.AsTime()) && m.r.IntN(4) != 0 {
		m.now = nb.AsTime()
	}
	agent := []string{"a", "b"}[m.r.IntN(2)]
	comp := taskstate.Compensating(s)
	what := fmt.Sprintf("claim %s#%d by %s (compensation %v)", s.GetName(), s.GetAttempt(), agent, comp)
	// The walk also knows dependencies the checks need before the claim.
	if err := m.beforeDispatch(s.GetName(), comp); err != nil {
		return what, err
	}
	paused := m.task.GetPaused()
	err := taskstate.Claim(m.task, s.GetName(), s.GetAttempt(), "s1", agent, m.now)
	switch {
	case err == nil && paused:
		return what, violation("a step of a paused task was claimed")
	case errors.Is(err, taskstate.ErrNotDue), paused && errors.Is(err, taskstate.ErrPaused):
		return what, nil
	case err != nil:
		return what, violation("claim of a queued step failed: %v", err)
	}
	m.sent = append(m.sent, execution{step: s.GetName(), attempt: s.GetAttempt(), agent: agent, compensation: comp})
	if comp {
		m.compSent[s.GetName()] = true
	}
	return what, nil
}

// beforeDispatch checks the ordering invariants for dispatching name now.
func (m *model) beforeDispatch(name string, comp bool) error {
	if comp {
		// Compensations strictly reverse-topological, transitively.
		for _, d := range taskstate.Downstream(m.task, name) {
			if m.live[d] > 0 || taskstate.Compensating(taskstate.FindStep(m.task, d)) {
				return violation("compensation of %s dispatched while %s downstream of it is not undone (live %d, %s)", name, d, m.live[d], taskstate.FindStep(m.task, d).GetState())
			}
		}
		return nil
	}
	for _, u := range taskstate.Upstream(m.task, name) {
		if m.compSent[u] {
			return violation("%s dispatched after the compensation of %s upstream of it was dispatched", name, u)
		}
	}
	for _, d := range taskstate.Downstream(m.task, name) {
		if m.compSent[d] || m.undone[d] > 0 {
			return violation("%s dispatched after %s, which depends on it, was compensated", name, d)
		}
	}
	return nil
}

func (m *model) result() (string, error) {
	if len(m.sent) == 0 {
		return "result: nothing sent", nil
	}
	// Mostly the latest executions, sometimes any earlier one (late or
	// duplicate), sometimes from the wrong agent.
	e := m.sent[len(m.sent)-1-m.r.IntN(min(len(m.sent), 3))]
	if m.r.IntN(5) == 0 {
		e = m.sent[m.r.IntN(len(m.sent))]
	}
	agent := e.agent
	if m.r.IntN(10) == 0 {
		agent = "c"
	}
	s := taskstate.FindStep(m.task, e.step)
	current := !taskstate.TerminalTask(m.task.GetState()) && taskstate.Dispatched(s) && s.GetAttempt() == e.attempt && s.GetLockedByAgent() == agent
	ref := &reevev1.StepRef{Namespace: "default", TaskId: "t-1", Step: e.step, Attempt: e.attempt}
	var err error
	var what string
	switch k := m.r.IntN(10); {
	case k < 6:
		what = fmt.Sprintf("success %s#%d from %s", e.step, e.attempt, agent)
		wasComp := taskstate.Compensating(s)
		err = taskstate.Complete(m.task, ref, agent, nil, m.now)
		if err == nil {
			if wasComp {
				if m.live[e.step] < 1 {
					return what, violation("compensation of %s accepted though no success of it is left to undo", e.step)
				}
				m.live[e.step]--
				m.undone[e.step]++
			} else {
				m.succeeded[e.step]++
				m.compSent[e.step] = false
				if taskstate.Spec(m.task, e.step).GetCompensation() != nil {
					if m.live[e.step]++; m.live[e.step] > 1 {
						return what, violation("%s succeeded twice without an undo in between", e.step)
					}
				}
			}
		}
	case k < 8:
		what = fmt.Sprintf("retryable failure %s#%d from %s", e.step, e.attempt, agent)
		err = taskstate.Fail(m.task, ref, agent, &reevev1.StepError{Message: "flaky"}, m.now)
	default:
		what = fmt.Sprintf("permanent failure %s#%d from %s", e.step, e.attempt, agent)
		err = taskstate.Fail(m.task, ref, agent, &reevev1.StepError{Message: "no", NonRetryable: true}, m.now)
	}
	if current != (err == nil) {
		return what, violation("result of the current execution %v: accepted %v, err %v", current, err == nil, err)
	}
	return what, nil
}

// dropped is an agent's stream ending while it holds a dispatched
// execution: sometimes the agent adopts it again (RestoreOnReconnect, here
// or elsewhere), then the scheduler's timer fires at the heartbeat deadline
// (sometimes early, for another agent or a superseded attempt) and applies
// the supervisor's decision in the same step, as scheduler/heartbeats.go does.
func (m *model) dropped() (string, error) {
	// A deferred execution is no agent's: no stream of it ends.
	s := m.pick(func(s *reevev1.Step) bool { return taskstate.Dispatched(s) && !s.GetDeferred() })
	if s == nil {
		return "agent dropped (nothing dispatched)", nil
	}
	m.now = m.now.Add(10 * time.Millisecond) // later than any earlier adoption
	name, cur, holder := s.GetName(), s.GetAttempt(), s.GetLockedByAgent()
	agent, attempt := holder, cur
	if m.r.IntN(8) == 0 {
		agent = "other"
	}
	if m.r.IntN(8) == 0 {
		attempt--
	}
	lastBeat := m.now
	deadline := lastBeat.Add(time.Duration(m.r.IntN(3000)+2) * time.Millisecond)
	readopted := false
	if m.r.IntN(5) == 0 {
		readopted = taskstate.RestoreOnReconnect(m.task, name, cur, holder, "scheduler/s2", lastBeat.Add(time.Millisecond)) == nil
	}
	if m.r.IntN(5) != 0 {
		m.now = deadline
	}
	what := fmt.Sprintf("agent %s dropped %s#%d (re-adopted %v, deadline %s)", agent, name, attempt, readopted, deadline.Sub(t0))
	before := proto.Clone(m.task).(*reevev1.Task)
	act, delay, err := taskstate.ExpireDisconnected(m.task, name, attempt, agent, lastBeat, deadline, "scheduler/s1", m.now)
	due := agent == holder && attempt == cur && !readopted && !m.now.Before(deadline)
	if due != (err == nil) {
		return what, violation("expiry of a dropped agent's execution, due=%v: err %v", due, err)
	}
	if err != nil {
		if !proto.Equal(before, m.task) {
			return what, violation("refused expiry (%v) changed the task", err)
		}
		return what, nil
	}
	switch act {
	case taskstate.ActionRetry:
		err = taskstate.RetryExpired(m.task, name, attempt, delay, "scheduler/s1", m.now)
	case taskstate.ActionCompensate:
		err = taskstate.CompensateExpired(m.task, name, attempt, "", "scheduler/s1", m.now)
	case taskstate.ActionFail:
		err = taskstate.FailExpired(m.task, name, attempt, "", "scheduler/s1", m.now)
	}
	if err != nil {
		return what, violation("%v after an accepted expiry: %v", act, err)
	}
	return what + " " + act.String(), nil
}

// supervise moves the clock and acts on an expired execution as the
// supervisor does (taskstate.Decide), sometimes too early or for a
// superseded attempt.
func (m *model) supervise() (string, error) {
	if at, ok := taskstate.AwaitingStart(m.task); ok && m.r.IntN(2) == 0 {
		return m.start(at)
	}
	if at, ok := taskstate.TaskDeadline(m.task); ok && m.r.IntN(4) == 0 {
		return m.taskTimeout(at)
	}
	s := m.pick(func(s *reevev1.Step) bool { _, ok := taskstate.Deadline(s); return ok })
	if s == nil {
		m.now = m.now.Add(time.Duration(m.r.IntN(90)) * time.Second)
		return "clock moves", nil
	}
	at, _ := taskstate.Deadline(s)
	if m.r.IntN(5) != 0 && m.now.Before(at) {
		m.now = at
	}
	cur := s.GetAttempt()
	attempt := cur
	if m.r.IntN(8) == 0 {
		attempt--
	}
	act, delay := taskstate.Decide(m.task, s)
	what := fmt.Sprintf("supervisor %v %s#%d (deadline %s)", act, s.GetName(), attempt, at.Sub(t0))
	var err error
	switch act {
	case taskstate.ActionRetry:
		err = taskstate.RetryExpired(m.task, s.GetName(), attempt, delay, "supervisor/x", m.now)
	case taskstate.ActionCompensate:
		err = taskstate.CompensateExpired(m.task, s.GetName(), attempt, "", "supervisor/x", m.now)
	case taskstate.ActionFail:
		err = taskstate.FailExpired(m.task, s.GetName(), attempt, "", "supervisor/x", m.now)
	case taskstate.ActionWake:
		err = taskstate.Wake(m.task, s.GetName(), attempt, "supervisor/x", m.now)
		if err == nil && taskstate.FindStep(m.task, s.GetName()).GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
			return what, violation("a woken sleep step is %s, not SUCCEEDED", taskstate.FindStep(m.task, s.GetName()).GetState())
		}
	}
	due := !m.now.Before(at) && attempt == cur
	if due != (err == nil) {
		return what, violation("supervisor action on an execution expired=%v: err %v", due, err)
	}
	return what, nil
}

func (m *model) operator() (string, error) {
	switch m.r.IntN(5) {
	case 4:
		if m.task.GetPaused() {
			return "operator resume", taskstate.Resume(m.task, "", "operator", m.now)
		}
		return "operator pause", taskstate.Pause(m.task, "", "operator", m.now)
	case 0:
		undo := m.r.IntN(2) == 0
		return fmt.Sprintf("operator cancel (undo %v)", undo), taskstate.Cancel(m.task, "", "operator", undo, m.now)
	case 1:
		return "operator fail", taskstate.FailTask(m.task, "", "operator", m.now)
	case 2:
		return "operator compensate", taskstate.Compensate(m.task, "", "operator", m.now)
	}
	s := m.task.GetSteps()[m.r.IntN(len(m.task.GetSteps()))]
	if f := m.pick(func(s *reevev1.Step) bool { return s.GetState() == reevev1.StepState_STEP_STATE_FAILED }); f != nil && m.r.IntN(4) != 0 {
		s = f
	}
	return "operator retry " + s.GetName(), taskstate.RetryFailed(m.task, s.GetName(), 0, "", "operator", m.now)
}

// start starts a task waiting for its start time as the supervisor does
// (taskstate.DecideTimer), sometimes too early.
func (m *model) start(at time.Time) (string, error) {
	if m.r.IntN(5) != 0 && m.now.Before(at) {
		m.now = at
	}
	act, _ := taskstate.DecideTimer(m.task, taskstate.StartMark)
	what := fmt.Sprintf("supervisor %v (start time %s)", act, at.Sub(t0))
	err := taskstate.StartTask(m.task, "supervisor/x", m.now)
	if due := !m.now.Before(at); due != (err == nil) {
		return what, violation("start, due=%v: err %v", due, err)
	}
	if _, still := taskstate.AwaitingStart(m.task); err == nil && still {
		return what, violation("a started task still waits to start")
	}
	return what, nil
}

// taskTimeout acts on the task's deadline as the supervisor does
// (taskstate.DecideTimer), sometimes too early.
func (m *model) taskTimeout(at time.Time) (string, error) {
	if m.r.IntN(5) != 0 && m.now.Before(at) {
		m.now = at
	}
	act, _ := taskstate.DecideTimer(m.task, taskstate.DeadlineMark)
	what := fmt.Sprintf("supervisor task deadline %v (deadline %s)", act, at.Sub(t0))
	err := taskstate.ExpireTask(m.task, act, "", "supervisor/x", m.now)
	if due := !m.now.Before(at); due != (err == nil) {
		return what, violation("task deadline action, due=%v: err %v", due, err)
	}
	if err == nil && m.task.GetState() != reevev1.TaskState_TASK_STATE_FAILED && m.task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING &&
		m.task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		return what, violation("a task past its deadline is %s", taskstate.StateName(m.task.GetState()))
	}
	return what, nil
}

var errViolation = errors.New("INVARIANT")

func violation(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errViolation, fmt.Sprintf(format, args...))
}

// check verifies the invariants of the task as it is now.
func (m *model) check() error {
	t := m.task
	terminal := taskstate.TerminalTask(t.GetState())
	moving := false
	for _, s := range t.GetSteps() {
		_, deadline := taskstate.Deadline(s)
		switch {
		case terminal && (taskstate.Queued(s) || taskstate.Dispatched(s) || deadline):
			return violation("task %s keeps step %s %s queued or dispatched (ready/deadline keys)", taskstate.StateName(t.GetState()), s.GetName(), taskstate.StateName(s.GetState()))
		case (taskstate.Dispatched(s) || taskstate.Waiting(s)) && !deadline:
			return violation("step %s is dispatched or waiting without a deadline", s.GetName())
		case taskstate.Waiting(s) && !taskstate.WaitsExternal(t, s) && !taskstate.Sleeping(t, s):
			return violation("step %s waits though it is an agent's", s.GetName())
		case s.GetDeferred() && (s.GetState() != reevev1.StepState_STEP_STATE_RUNNING || s.GetLockedByAgent() != ""):
			return violation("step %s is deferred but %s, held by %q", s.GetName(), taskstate.StateName(s.GetState()), s.GetLockedByAgent())
		case taskstate.Queued(s) && !taskstate.KeyWaiting(t) && (taskstate.WaitsExternal(t, s) || workflow.IsSleep(taskstate.Spec(t, s.GetName()))):
			return violation("step %s, completed from outside or sleeping, is queued for an agent", s.GetName())
		case taskstate.Queued(s) || taskstate.Dispatched(s) || taskstate.Waiting(s):
			moving = true
		}
		if taskstate.Waiting(s) && terminal {
			return violation("step %s WAITING in a %s task", s.GetName(), taskstate.StateName(t.GetState()))
		}
		if s.GetState() == reevev1.StepState_STEP_STATE_RUNNING || taskstate.Waiting(s) {
			for _, u := range taskstate.Upstream(t, s.GetName()) {
				if st := taskstate.FindStep(t, u).GetState(); st != reevev1.StepState_STEP_STATE_SUCCEEDED {
					return violation("%s runs while %s upstream of it is %s", s.GetName(), u, taskstate.StateName(st))
				}
			}
		}
	}
	if _, ok := taskstate.AwaitingStart(t); ok {
		for _, s := range t.GetSteps() {
			if s.GetAttempt() != 0 || s.GetReadyTime() != nil {
				return violation("step %s of a task waiting to start is at attempt %d", s.GetName(), s.GetAttempt())
			}
		}
		moving = true // its start key moves it
	}
	if !terminal && !moving {
		return violation("task %s has nothing that will move it (no queued or dispatched step)", taskstate.StateName(t.GetState()))
	}
	if t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATED {
		for _, sp := range t.GetWorkflow().GetSteps() {
			n := sp.GetName()
			if sp.GetCompensation() != nil && (m.live[n] != 0 || m.undone[n] != m.succeeded[n]) {
				return violation("task COMPENSATED but %s succeeded %d times and was undone %d times", n, m.succeeded[n], m.undone[n])
			}
		}
	}
	if terminal && t.GetEndTime() == nil {
		return violation("terminal task without an end time")
	}
	if !terminal && slices.Contains([]reevev1.TaskState{reevev1.TaskState_TASK_STATE_UNSPECIFIED}, t.GetState()) {
		return violation("task state unspecified")
	}
	return nil
}

// outside completes a random step from outside (wait.go): by name or by a
// token's attempt (sometimes a replaced one), with an output or an error,
// sometimes a repeat of an earlier completion. Accepted exactly when the
// step's forward execution awaits it (WAITING, or deferred; by token also
// while its agent still runs it) and it was not completed otherwise.
func (m *model) outside() (string, error) {
	s := m.task.GetSteps()[m.r.IntN(len(m.task.GetSteps()))]
	var attempt int32
	switch m.r.IntN(4) {
	case 0: // by name
	case 1:
		attempt = s.GetAttempt() - 1
	default:
		attempt = s.GetAttempt()
	}
	c := taskstate.Completion{Attempt: attempt, Actor: "outside"}
	if m.r.IntN(3) == 0 {
		c.Error = &reevev1.StepError{Code: "rejected"}
	} else {
		c.Output = structpb.NewNumberValue(float64(m.r.IntN(2)))
	}
	what := fmt.Sprintf("outside completes %s#%d (error %v)", s.GetName(), attempt, c.Error != nil)
	if taskstate.Repeated(m.task, s, c) {
		if !bytes.Equal(s.GetCompletionDigest(), taskstate.CompletionDigest(c)) {
			return what, violation("a completion taken for a repeat differs from the one recorded")
		}
		return what + " (a repeat: nothing changes)", nil
	}
	cur := attempt
	if cur == 0 {
		cur = s.GetAttempt()
	}
	running := s.GetState() == reevev1.StepState_STEP_STATE_RUNNING && !s.GetCompensation()
	completed := len(s.GetCompletionDigest()) > 0 && cur == s.GetCompletionAttempt()
	want := !taskstate.TerminalTask(m.task.GetState()) && cur > 0 && cur == s.GetAttempt() && !s.GetCompensation() && !completed &&
		(taskstate.Awaiting(m.task, s) || attempt != 0 && running)
	err := taskstate.CompleteFromOutside(m.task, s.GetName(), c, m.now)
	if want != (err == nil) {
		return what, violation("completion from outside expected %v: err %v", want, err)
	}
	if err == nil && c.Error == nil {
		m.succeeded[s.GetName()]++
		m.compSent[s.GetName()] = false
		if taskstate.Spec(m.task, s.GetName()).GetCompensation() != nil {
			if m.live[s.GetName()]++; m.live[s.GetName()] > 1 {
				return what, violation("%s succeeded twice without an undo in between", s.GetName())
			}
		}
	}
	return what, nil
}

// deferral is an agent handing its dispatched execution off, sometimes
// another agent's, sometimes a compensation (refused).
func (m *model) deferral() (string, error) {
	s := m.pick(taskstate.Dispatched)
	if s == nil {
		return "defer: nothing dispatched", nil
	}
	agent := s.GetLockedByAgent()
	if m.r.IntN(6) == 0 {
		agent = "c"
	}
	want := !taskstate.TerminalTask(m.task.GetState()) && !taskstate.Compensating(s) && !s.GetDeferred() && agent == s.GetLockedByAgent() && agent != ""
	what := fmt.Sprintf("agent %s defers %s#%d", agent, s.GetName(), s.GetAttempt())
	err := taskstate.Defer(m.task, taskstate.Ref(m.task, s), agent, "", m.now)
	if want != (err == nil) {
		return what, violation("deferral expected %v: err %v", want, err)
	}
	return what, nil
}

package scheduler_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// ordersFlow is reserve → charge → ship, reserve and charge with a
// compensation, ship escalating by compensation; extra steps go between
// reserve and charge.
func ordersFlow(middle ...*reevev1.StepSpec) *reevev1.SubmitTaskRequest_InlineWorkflow {
	reserve := step("reserve", "inv.reserve")
	reserve.Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
	prev := "reserve"
	steps := []*reevev1.StepSpec{reserve}
	for _, m := range middle {
		m.DependsOn = []string{prev}
		prev = m.GetName()
		steps = append(steps, m)
	}
	charge := step("charge", "pay.charge", prev)
	charge.Compensation = &reevev1.CompensationSpec{Type: "pay.refund"}
	ship := step("ship", "ship.ship", "charge")
	ship.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	return inline(append(steps, charge, ship)...)
}

// operatorEnv is a scheduler, a raw agent of every type the orders flow
// uses, and the clients an operator has.
type operatorEnv struct {
	env   *testenv.Env
	c     reevev1.SchedulerServiceClient
	sup   reevev1.SupervisorServiceClient
	agent *testenv.RawAgent
}

func newOperatorEnv(t *testing.T) *operatorEnv {
	env, s, c := newEnv(t)
	return &operatorEnv{
		env: env, c: c,
		sup:   reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr)),
		agent: testenv.ConnectRaw(t, s.Addr, register("a-1", 8, "inv.reserve", "inv.release", "pay.charge", "pay.refund", "ship.ship", "mail.send")),
	}
}

// next waits for the next assignment and checks it is the named step (its
// compensation when compensation is set).
func (o *operatorEnv) next(t *testing.T, name string, compensation bool) *reevev1.StepRef {
	t.Helper()
	as := o.agent.NextAssignment(wait)
	if as.GetRef().GetStep() != name || as.GetCompensation() != compensation {
		t.Fatalf("assigned %v (compensation %v), want %s (compensation %v)", as.GetRef(), as.GetCompensation(), name, compensation)
	}
	return as.GetRef()
}

func (o *operatorEnv) succeed(t *testing.T, name string, compensation bool) {
	t.Helper()
	if ack := o.agent.Succeed(o.next(t, name, compensation), nil); !ack.GetAccepted() {
		t.Fatalf("result of %s refused: %v", name, ack)
	}
}

// compensating runs a task of flow until ship failed for good and charge's
// compensation was dispatched.
func (o *operatorEnv) compensating(t *testing.T, flow *reevev1.SubmitTaskRequest_InlineWorkflow, forward ...string) *reevev1.StepRef {
	t.Helper()
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: flow})
	for _, name := range forward {
		o.succeed(t, name, false)
	}
	if ack := o.agent.Fail(o.next(t, "ship", false), &reevev1.StepError{Message: "no courier", NonRetryable: true}); !ack.GetAccepted() {
		t.Fatalf("failure of ship refused: %v", ack)
	}
	return o.next(t, "charge", true)
}

func (o *operatorEnv) get(t *testing.T) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := o.c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTask()
}

// refused checks that call fails with FAILED_PRECONDITION naming want and
// changes nothing in etcd.
func (o *operatorEnv) refused(t *testing.T, want string, call func(ctx context.Context) error) {
	t.Helper()
	before := testenv.DataKeys(t, o.env.Etcd.Client())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := call(ctx)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("got %v, want FAILED_PRECONDITION containing %q", err, want)
	}
	if after := testenv.DataKeys(t, o.env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatal("a refused operator action changed etcd")
	}
}

// noLiveKeys checks that etcd holds no ready or deadline key: the task is
// terminal, nothing of it may be dispatched or recovered.
func (o *operatorEnv) noLiveKeys(t *testing.T) {
	t.Helper()
	for k := range testenv.DataKeys(t, o.env.Etcd.Client()) {
		if strings.HasPrefix(k, "/reeve/ready/") || strings.HasPrefix(k, "/reeve/deadlines/") {
			t.Errorf("terminal task left index key %s", k)
		}
	}
}

func (o *operatorEnv) retry(step string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := o.sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-1", Step: step})
		return err
	}
}

// Defect 2a and 2b: RetryStep while the task compensates, or after it was
// compensated, is refused and changes nothing; the task ends COMPENSATED
// with no step left queued.
func TestRetryStepRefusedWhileOrAfterCompensating(t *testing.T) {
	o := newOperatorEnv(t)
	ref := o.compensating(t, ordersFlow(), "reserve", "charge")
	o.refused(t, "task t-1 is COMPENSATING: retry_step needs the task FAILED", o.retry("ship"))
	if ack := o.agent.Succeed(ref, nil); !ack.GetAccepted() {
		t.Fatalf("refund refused: %v", ack)
	}
	o.succeed(t, "reserve", true)
	task := testenv.WaitTask(t, o.c, "", "t-1", wait)
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v, want COMPENSATED", task.GetState())
	}
	o.refused(t, "task t-1 is COMPENSATED: retry_step needs the task FAILED", o.retry("ship"))
	o.noLiveKeys(t)
	if s := stepOf(o.get(t), "ship"); s.GetState() != reevev1.StepState_STEP_STATE_FAILED || s.GetScheduleToStartDeadline() != nil || s.GetCompleteBy() != nil {
		t.Fatalf("ship %v, want FAILED with no deadline", s)
	}
}

// Defect 2c and 4: FailTask interrupts the compensation of charge; a
// RetryStep of ship is refused (charge's charge may have been refunded), and
// CompensateTask runs charge's compensation again before reserve's.
func TestCompensateAfterFailTaskInterruptedTheUndo(t *testing.T) {
	o := newOperatorEnv(t)
	o.compensating(t, ordersFlow(), "reserve", "charge")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := o.sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "t-1", Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	o.refused(t, `the compensation of step "charge" is CANCELED`, o.retry("ship"))
	if _, err := o.sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "t-1"}); err != nil {
		t.Fatal(err)
	}
	o.succeed(t, "charge", true)
	o.succeed(t, "reserve", true)
	task := testenv.WaitTask(t, o.c, "", "t-1", wait)
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || stepOf(task, "charge").GetState() != reevev1.StepState_STEP_STATE_COMPENSATED {
		t.Fatalf("task %v, charge %v: want COMPENSATED with charge refunded", task.GetState(), stepOf(task, "charge").GetState())
	}
	o.noLiveKeys(t)
}

// A cancel of a task that is compensating leaves the undo to finish; with
// no_compensate it stops the undo and the task ends CANCELED, which
// RetryStep does not revive, and which CompensateTask finishes undoing
// later: charge's interrupted refund runs again, then reserve's release.
func TestCancelWhileCompensating(t *testing.T) {
	o := newOperatorEnv(t)
	o.compensating(t, ordersFlow(), "reserve", "charge")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := o.c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-1"})
	if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
		t.Fatalf("cancel of a compensating task: %v, %v; want it left COMPENSATING", resp.GetTask().GetState(), err)
	}
	resp, err = o.c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-1", NoCompensate: true})
	if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("cancel without compensating: %v, %v; want CANCELED", resp.GetTask().GetState(), err)
	}
	o.refused(t, "task t-1 is CANCELED: retry_step needs the task FAILED", o.retry("ship"))
	if _, err := o.sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "t-1"}); err != nil {
		t.Fatalf("compensate the canceled task: %v", err)
	}
	o.succeed(t, "charge", true)
	o.succeed(t, "reserve", true)
	if task := testenv.WaitTask(t, o.c, "", "t-1", wait); task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v, want COMPENSATED", task.GetState())
	}
	o.noLiveKeys(t)
}

// Cancel undoes a saga (issue 37): with reserve and charge done and ship
// running, the ship attempt is told to stop, charge is refunded, then
// reserve released, and the task ends COMPENSATED with the cancel's reason.
// A task with nothing done ends CANCELED at once.
func TestCancelUndoesTheSaga(t *testing.T) {
	o := newOperatorEnv(t)
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: ordersFlow()})
	o.succeed(t, "reserve", false)
	o.succeed(t, "charge", false)
	shipping := o.next(t, "ship", false)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := o.c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-1", Reason: "customer changed their mind"})
	if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
		t.Fatalf("cancel: %v, %v; want COMPENSATING", resp.GetTask().GetState(), err)
	}
	if m := o.agent.Next(wait); m.GetCancel().GetRef().GetStep() != shipping.GetStep() {
		t.Fatalf("got %v, want a CancelStep for the running ship attempt", m)
	}
	o.succeed(t, "charge", true)
	o.succeed(t, "reserve", true)
	task := testenv.WaitTask(t, o.c, "", "t-1", wait)
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || !strings.Contains(task.GetReason(), "canceled: customer changed their mind") {
		t.Fatalf("task %v, reason %q; want COMPENSATED, canceled", task.GetState(), task.GetReason())
	}
	o.noLiveKeys(t)

	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-2", Workflow: ordersFlow()})
	resp, err = o.c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-2"})
	if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("cancel of a task with nothing done: %v, %v; want CANCELED", resp.GetTask().GetState(), err)
	}
}

// Defect 3: with reserve → notify (no compensation) → charge → ship, the
// compensation of reserve waits until charge was refunded.
func TestCompensationWaitsForTransitiveDependents(t *testing.T) {
	o := newOperatorEnv(t)
	ref := o.compensating(t, ordersFlow(step("notify", "mail.send")), "reserve", "notify", "charge")
	if s := stepOf(o.get(t), "reserve"); s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("reserve %v while charge is being refunded, want SUCCEEDED until the refund is done", s.GetState())
	}
	if ack := o.agent.Succeed(ref, nil); !ack.GetAccepted() {
		t.Fatalf("refund refused: %v", ack)
	}
	o.succeed(t, "reserve", true)
	if task := testenv.WaitTask(t, o.c, "", "t-1", wait); task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v, want COMPENSATED", task.GetState())
	}
}

// A paused task dispatches nothing (issue 37): the running step's result is
// recorded, the next step waits with no ready and no deadline key (so no
// scheduler claims it and no schedule-to-start timer runs); resumed, it is
// dispatched, after the resume in its history.
func TestPauseHoldsDispatchUntilResume(t *testing.T) {
	o := newOperatorEnv(t)
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: ordersFlow()})
	reserve := o.next(t, "reserve", false)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for range 2 { // a second pause answers with the task as it is
		resp, err := o.sup.PauseTask(ctx, &reevev1.PauseTaskRequest{TaskId: "t-1", Reason: "supplier outage"})
		if err != nil || !resp.GetTask().GetPaused() || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("pause: %v, %v; want RUNNING and paused", resp.GetTask(), err)
		}
	}
	if ack := o.agent.Succeed(reserve, nil); !ack.GetAccepted() {
		t.Fatalf("the running step's result while paused refused: %v", ack)
	}
	if st := stepOf(o.get(t), "charge"); st.GetState() != reevev1.StepState_STEP_STATE_PENDING || st.GetReadyTime() == nil {
		t.Fatalf("charge %v, want queued", st)
	}
	for k := range testenv.DataKeys(t, o.env.Etcd.Client()) {
		if strings.HasPrefix(k, "/reeve/ready/") || strings.HasPrefix(k, "/reeve/deadlines/") {
			t.Fatalf("a paused task has %s: it could be dispatched or expired", k)
		}
	}
	if _, err := o.sup.ResumeTask(ctx, &reevev1.ResumeTaskRequest{TaskId: "t-1"}); err != nil {
		t.Fatal(err)
	}
	charge := o.next(t, "charge", false)
	var resumed, dispatched int
	for i, e := range o.get(t).GetHistory() {
		switch {
		case e.GetKind() == "task.resumed":
			resumed = i
		case e.GetKind() == "step.dispatched" && e.GetStep() == "charge":
			dispatched = i
		}
	}
	if resumed == 0 || dispatched < resumed {
		t.Fatalf("charge dispatched at history event %d, the resume at %d: want after the resume", dispatched, resumed)
	}
	o.agent.Succeed(charge, nil)
	o.succeed(t, "ship", false)
	if task := testenv.WaitTask(t, o.c, "", "t-1", wait); task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v, want SUCCEEDED", task.GetState())
	}
}

// RerunTask runs a FAILED task again from its failed step as a new task
// (issue 37): the steps before it keep their outputs and are not run again,
// the old task stays as it was, a retry with the same id returns the same
// task, and a task that is still running is refused.
func TestRerunFromTheFailedStep(t *testing.T) {
	o := newOperatorEnv(t)
	flow := ordersFlow()
	ship := flow.InlineWorkflow.GetSteps()[2]
	ship.Escalation = reevev1.Escalation_ESCALATION_FAIL
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: flow})
	if ack := o.agent.Succeed(o.next(t, "reserve", false), map[string]any{"hold": "h-7"}); !ack.GetAccepted() {
		t.Fatal(ack)
	}
	o.succeed(t, "charge", false)
	if ack := o.agent.Fail(o.next(t, "ship", false), &reevev1.StepError{Code: "bad_address", NonRetryable: true}); !ack.GetAccepted() {
		t.Fatal(ack)
	}
	if old := testenv.WaitTask(t, o.c, "", "t-1", wait); old.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("old task %v, want FAILED", old.GetState())
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req := &reevev1.RerunTaskRequest{TaskId: "t-1", FromStep: "ship", NewTaskId: "t-1-again", Reason: "address fixed"}
	resp, err := o.c.RerunTask(ctx, req)
	if err != nil || !resp.GetCreated() || resp.GetTask().GetRerunOf() != "t-1" {
		t.Fatalf("rerun: %v, %v; want a new task rerun_of t-1", resp, err)
	}
	if again, err := o.c.RerunTask(ctx, req); err != nil || again.GetCreated() || again.GetTask().GetId() != "t-1-again" {
		t.Fatalf("the same rerun again: %v, %v; want the same task, not created", again, err)
	}
	as := o.agent.NextAssignment(wait)
	if as.GetRef().GetTaskId() != "t-1-again" || as.GetRef().GetStep() != "ship" {
		t.Fatalf("assigned %v, want ship of the new task (reserve and charge kept)", as.GetRef())
	}
	if got := as.GetDependencyOutputs()["charge"]; got == nil {
		t.Fatalf("ship's assignment lacks charge's kept output: %v", as.GetDependencyOutputs())
	}
	o.agent.Succeed(as.GetRef(), nil)
	task := testenv.WaitTask(t, o.c, "", "t-1-again", wait)
	if task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || stepOf(task, "reserve").GetOutput().GetStructValue().GetFields()["hold"].GetStringValue() != "h-7" {
		t.Fatalf("new task %v, reserve output %v; want SUCCEEDED with reserve's output kept", task.GetState(), stepOf(task, "reserve").GetOutput())
	}
	if old := o.get(t); old.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("old task %v after the rerun, want it left FAILED", old.GetState())
	}

	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-2", Workflow: flow})
	if _, err := o.c.RerunTask(ctx, &reevev1.RerunTaskRequest{TaskId: "t-2", FromStep: "reserve"}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(status.Convert(err).Message(), "rerun_task needs the task FAILED, COMPENSATED or SUCCEEDED") {
		t.Fatalf("rerun of a running task: %v, want FAILED_PRECONDITION naming the states", err)
	}
}

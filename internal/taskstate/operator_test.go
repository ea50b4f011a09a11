package taskstate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// taskIn builds an orders task in the named state; ship is the failed step
// where there is one.
func taskIn(t *testing.T, state string) *reevev1.Task {
	t.Helper()
	task := taskstate.New("default", "t-1", orders(), nil, t0)
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	succeed := func(name string) { ok(taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0)) }
	switch state {
	case "PENDING":
		return task
	case "RUNNING":
		succeed("reserve")
		return task
	case "SUCCEEDED":
		succeed("reserve")
		succeed("charge")
		succeed("ship")
		return task
	case "CANCELED": // without undoing: reserve is left to undo
		succeed("reserve")
		ok(taskstate.Cancel(task, "", "client", false, t0))
		return task
	case "PAUSED": // RUNNING, paused
		succeed("reserve")
		ok(taskstate.Pause(task, "", "operator", t0))
		return task
	case "CANCELED_CLEAN": // nothing had run: nothing to undo
		ok(taskstate.Cancel(task, "", "client", true, t0))
		return task
	case "FAILED":
		succeed("reserve")
		succeed("charge")
		ok(taskstate.Fail(task, run(t, task, "ship", t0), "a", &reevev1.StepError{NonRetryable: true}, t0))
		ok(taskstate.FailTask(task, "", "operator", t0)) // the compensation of charge is interrupted
		return task
	case "FAILED_FORWARD":
		succeed("reserve")
		ok(taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{NonRetryable: true}, t0))
		return task // charge's escalation is fail
	case "COMPENSATING", "COMPENSATED":
		succeed("reserve")
		succeed("charge")
		ok(taskstate.Fail(task, run(t, task, "ship", t0), "a", &reevev1.StepError{NonRetryable: true}, t0))
		if state == "COMPENSATING" {
			return task
		}
		succeed("charge")
		succeed("reserve")
		return task
	}
	t.Fatalf("no task in state %s", state)
	return nil
}

func TestOperatorActionsAcceptOnlyTheirStates(t *testing.T) {
	do := map[string]func(*reevev1.Task) error{
		"cancel":      func(task *reevev1.Task) error { return taskstate.Cancel(task, "", "operator", false, t0) },
		"cancel undo": func(task *reevev1.Task) error { return taskstate.Cancel(task, "", "operator", true, t0) },
		"pause":       func(task *reevev1.Task) error { return taskstate.Pause(task, "", "operator", t0) },
		"resume":      func(task *reevev1.Task) error { return taskstate.Resume(task, "", "operator", t0) },
		"rerun ship": func(task *reevev1.Task) error {
			_, err := taskstate.Rerun(task, "t-2", "ship", nil, "", "operator", t0)
			return err
		},
		"fail":       func(task *reevev1.Task) error { return taskstate.FailTask(task, "", "operator", t0) },
		"compensate": func(task *reevev1.Task) error { return taskstate.Compensate(task, "", "operator", t0) },
		"retry ship": func(task *reevev1.Task) error { return taskstate.RetryFailed(task, "ship", 0, "", "operator", t0) },
	}
	cases := []struct {
		state, action string
		want          string // "" accepted, else a fragment of the refusal
	}{
		{"PENDING", "cancel", ""},
		{"PENDING", "cancel undo", ""},
		{"PENDING", "fail", ""},
		{"PENDING", "compensate", ""},
		{"PENDING", "retry ship", "task t-1 is PENDING: retry_step needs the task FAILED"},
		{"RUNNING", "cancel", ""},
		{"RUNNING", "cancel undo", ""},
		{"RUNNING", "fail", ""},
		{"RUNNING", "compensate", ""},
		{"RUNNING", "retry ship", "task t-1 is RUNNING: retry_step needs the task FAILED"},
		{"COMPENSATING", "cancel", ""},
		{"COMPENSATING", "cancel undo", "task is being compensated"},
		{"COMPENSATING", "fail", ""},
		{"COMPENSATING", "compensate", "task t-1 is COMPENSATING: compensate_task needs the task PENDING, RUNNING or FAILED"},
		{"COMPENSATING", "retry ship", "task t-1 is COMPENSATING: retry_step needs the task FAILED"},
		{"FAILED", "cancel", "task is terminal"},
		{"FAILED", "cancel undo", "task is terminal"},
		{"FAILED", "fail", "task t-1 is FAILED: fail_task needs the task PENDING, RUNNING or COMPENSATING"},
		{"FAILED", "compensate", ""},
		{"FAILED", "retry ship", `task t-1 was compensating when it failed (the compensation of step "charge" is CANCELED)`},
		{"COMPENSATED", "cancel", "task is terminal"},
		{"COMPENSATED", "cancel undo", "task is terminal"},
		{"COMPENSATED", "fail", "task t-1 is COMPENSATED: fail_task needs"},
		{"COMPENSATED", "compensate", "task t-1 is COMPENSATED: compensate_task needs"},
		{"COMPENSATED", "retry ship", "task t-1 is COMPENSATED: retry_step needs the task FAILED"},
		{"CANCELED", "retry ship", "task t-1 is CANCELED: retry_step needs the task FAILED"},
		{"CANCELED", "compensate", ""},
		{"CANCELED", "cancel undo", "task is terminal"},
		{"CANCELED_CLEAN", "compensate", "task t-1 is CANCELED with nothing left to undo"},
		{"CANCELED", "fail", "task t-1 is CANCELED: fail_task needs"},
		{"SUCCEEDED", "retry ship", "task t-1 is SUCCEEDED: retry_step needs the task FAILED"},
		{"SUCCEEDED", "compensate", "task t-1 is SUCCEEDED: compensate_task needs"},
		{"SUCCEEDED", "cancel undo", "task is terminal"},
		{"PENDING", "pause", ""},
		{"RUNNING", "pause", ""},
		{"COMPENSATING", "pause", ""},
		{"FAILED", "pause", "task t-1 is FAILED: pause_task needs the task PENDING, RUNNING or COMPENSATING"},
		{"COMPENSATED", "pause", "task t-1 is COMPENSATED: pause_task needs"},
		{"CANCELED", "pause", "task t-1 is CANCELED: pause_task needs"},
		{"SUCCEEDED", "pause", "task t-1 is SUCCEEDED: pause_task needs"},
		{"PAUSED", "pause", "nothing to change"},
		{"PAUSED", "resume", ""},
		{"PAUSED", "cancel", ""},
		{"PAUSED", "fail", ""},
		{"PAUSED", "compensate", ""},
		{"RUNNING", "resume", "nothing to change"},
		{"FAILED", "resume", "nothing to change"},
		{"PENDING", "rerun ship", "task t-1 is PENDING: rerun_task needs the task FAILED, COMPENSATED or SUCCEEDED"},
		{"RUNNING", "rerun ship", "task t-1 is RUNNING: rerun_task needs"},
		{"PAUSED", "rerun ship", "task t-1 is RUNNING: rerun_task needs"},
		{"COMPENSATING", "rerun ship", "task t-1 is COMPENSATING: rerun_task needs"},
		{"CANCELED", "rerun ship", "task t-1 is CANCELED: rerun_task needs"},
		{"FAILED", "rerun ship", ""},
		{"COMPENSATED", "rerun ship", ""},
		{"SUCCEEDED", "rerun ship", ""},
		{"FAILED_FORWARD", "retry ship", `step "ship" of task t-1 is SKIPPED: retry_step needs the step FAILED`},
	}
	for _, tc := range cases {
		t.Run(tc.state+"/"+tc.action, func(t *testing.T) {
			task := taskIn(t, tc.state)
			before := proto.Clone(task)
			err := do[tc.action](task)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal containing %q", err, tc.want)
			}
			if !errors.Is(err, taskstate.ErrWrongState) && !errors.Is(err, taskstate.ErrTerminal) && !errors.Is(err, taskstate.ErrUndoing) && !errors.Is(err, taskstate.ErrNoChange) {
				t.Fatalf("%v is neither ErrWrongState, ErrTerminal, ErrUndoing nor ErrNoChange", err)
			}
			if !proto.Equal(before, task) {
				t.Fatal("a refused action changed the task")
			}
		})
	}
}

// Defect 4: FailTask interrupted the compensation of charge; a later
// CompensateTask must undo charge, then reserve, and only then end
// COMPENSATED.
func TestCompensateAfterInterruptedCompensationUndoesEverything(t *testing.T) {
	task := taskIn(t, "FAILED")
	if s := taskstate.FindStep(task, "charge"); s.GetState() != reevev1.StepState_STEP_STATE_CANCELED || !s.GetCompensation() {
		t.Fatalf("charge %v, want CANCELED with its compensation started", s)
	}
	if err := taskstate.Compensate(task, "", "operator", t0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"charge", "reserve"} {
		s := taskstate.FindStep(task, name)
		if !taskstate.Queued(s) || !taskstate.Compensating(s) {
			t.Fatalf("%s %v, want its compensation queued (task %v)", name, s, states(task))
		}
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v %v, want COMPENSATED", task.GetState(), states(task))
	}
}

// Defect 3: reserve → notify (no compensation) → charge → ship (fails):
// reserve's compensation waits for charge's.
func TestCompensationOrderIsTransitive(t *testing.T) {
	wf := orders()
	wf.Steps = []*reevev1.StepSpec{
		wf.Steps[0],
		{Name: "notify", Type: "mail.send", DependsOn: []string{"reserve"}},
		{Name: "charge", Type: "pay.charge", DependsOn: []string{"notify"}, Compensation: wf.Steps[1].Compensation},
		wf.Steps[2],
	}
	task := taskstate.New("default", "t-1", wf, nil, t0)
	for _, name := range []string{"reserve", "notify", "charge"} {
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := taskstate.Fail(task, run(t, task, "ship", t0), "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	if s := taskstate.FindStep(task, "reserve"); taskstate.Compensating(s) {
		t.Fatalf("reserve's compensation started before charge's was done: %v", states(task))
	}
	if err := taskstate.Complete(task, run(t, task, "charge", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	if s := taskstate.FindStep(task, "reserve"); !taskstate.Compensating(s) || !taskstate.Queued(s) {
		t.Fatalf("reserve %v, want its compensation queued once charge was undone", s)
	}
}

// A failed compensation retried by an operator resumes the undo, and the
// compensations the failure canceled run again in order.
func TestRetryOfFailedCompensationResumesTheUndo(t *testing.T) {
	wf := orders()
	wf.Steps[1].Compensation.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
	task := taskstate.New("default", "t-1", wf, nil, t0)
	for _, name := range []string{"reserve", "charge"} {
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := taskstate.Fail(task, run(t, task, "ship", t0), "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{Message: "refund down"}, t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v, want FAILED after the refund failed", task.GetState())
	}
	if err := taskstate.Compensate(task, "", "operator", t0); !errors.Is(err, taskstate.ErrWrongState) {
		t.Fatalf("compensate after a failed compensation: %v, want a refusal", err)
	}
	if err := taskstate.RetryFailed(task, "charge", 0, "", "operator", t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING || taskstate.Compensating(taskstate.FindStep(task, "reserve")) {
		t.Fatalf("task %v %v, want COMPENSATING with only charge's compensation queued", task.GetState(), states(task))
	}
	for _, name := range []string{"charge", "reserve"} {
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v, want COMPENSATED", task.GetState())
	}
}

// A forward retry of a task that failed without any undo resumes it.
func TestRetryOfFailedForwardStepResumes(t *testing.T) {
	wf := orders()
	wf.Steps[2].Escalation = reevev1.Escalation_ESCALATION_FAIL
	task := taskstate.New("default", "t-1", wf, nil, t0)
	for _, name := range []string{"reserve", "charge"} {
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := taskstate.Fail(task, run(t, task, "ship", t0), "a", &reevev1.StepError{NonRetryable: true}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.RetryFailed(task, "ship", 0, "", "operator", t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.Complete(task, run(t, task, "ship", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v, want SUCCEEDED", task.GetState())
	}
}

// A cancel that undoes compensates the succeeded steps in reverse order and
// ends COMPENSATED, the running step canceled; without undoing, the task
// ends CANCELED at once and can be compensated later, ending COMPENSATED
// the same way.
func TestCancelUndoesWhatSucceeded(t *testing.T) {
	for _, undoNow := range []bool{true, false} {
		task := taskstate.New("default", "t-1", orders(), nil, t0)
		for _, name := range []string{"reserve", "charge"} {
			if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
				t.Fatal(err)
			}
		}
		shipping := run(t, task, "ship", t0)
		before := proto.Clone(task).(*reevev1.Task)
		if err := taskstate.Cancel(task, "customer changed their mind", "client", undoNow, t0); err != nil {
			t.Fatal(err)
		}
		if r := taskstate.Revoked(before, task, nil); len(r) != 1 || !proto.Equal(r[0].Ref, shipping) {
			t.Fatalf("undo=%v: revoked %v, want the running ship attempt told to stop", undoNow, r)
		}
		if !undoNow {
			if task.GetState() != reevev1.TaskState_TASK_STATE_CANCELED || !taskstate.LeftToUndo(task) {
				t.Fatalf("canceled without undo: task %v, left to undo %v; want CANCELED with work left", task.GetState(), taskstate.LeftToUndo(task))
			}
			if err := taskstate.Compensate(task, "", "operator", t0); err != nil {
				t.Fatalf("compensate a canceled task: %v", err)
			}
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
			t.Fatalf("undo=%v: task %v, want COMPENSATING", undoNow, task.GetState())
		}
		if st := taskstate.FindStep(task, "ship"); st.GetState() != reevev1.StepState_STEP_STATE_CANCELED {
			t.Fatalf("the running step is %v, want CANCELED", st.GetState())
		}
		// charge is undone first (it depends on reserve), then reserve.
		for _, name := range []string{"charge", "reserve"} {
			if q := taskstate.FindStep(task, name); !taskstate.Queued(q) {
				t.Fatalf("undo=%v: %s is %v, want its compensation queued (reverse order)", undoNow, name, q.GetState())
			}
			if err := taskstate.Complete(task, run(t, task, name, t0.Add(time.Second)), "a", nil, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
			t.Fatalf("undo=%v: task %v, want COMPENSATED", undoNow, task.GetState())
		}
		if undoNow && !strings.HasPrefix(task.GetReason(), "canceled: customer changed their mind") {
			t.Fatalf("reason %q, want it to say the task was canceled and why", task.GetReason())
		}
	}
}

// A paused task dispatches nothing: its queued step cannot be claimed,
// while the running step's result is recorded and the step after it waits
// queued; resuming queues it again with a fresh ready time and its full
// schedule-to-start timeout. Ending the task clears the pause.
func TestPausedTaskDispatchesNothingUntilResumed(t *testing.T) {
	wf := orders()
	wf.DefaultScheduleToStartTimeout = durationpb.New(time.Minute)
	task := taskstate.New("default", "t-1", wf, nil, t0)
	reserve := run(t, task, "reserve", t0)
	if err := taskstate.Pause(task, "maintenance", "operator", t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.Complete(task, reserve, "a", nil, t0.Add(time.Second)); err != nil {
		t.Fatalf("the running step's result while paused: %v", err)
	}
	charge := taskstate.FindStep(task, "charge")
	if !taskstate.Queued(charge) || taskstate.Dispatchable(task, charge) {
		t.Fatalf("charge queued %v dispatchable %v; want queued, not dispatchable", taskstate.Queued(charge), taskstate.Dispatchable(task, charge))
	}
	if err := taskstate.Claim(task, "charge", charge.GetAttempt(), "s1", "a", t0.Add(time.Second)); !errors.Is(err, taskstate.ErrPaused) {
		t.Fatalf("claim while paused: %v, want ErrPaused", err)
	}
	resumeAt := t0.Add(time.Hour)
	if err := taskstate.Resume(task, "", "operator", resumeAt); err != nil {
		t.Fatal(err)
	}
	if !taskstate.Dispatchable(task, charge) || !charge.GetReadyTime().AsTime().Equal(resumeAt) || !charge.GetScheduleToStartDeadline().AsTime().Equal(resumeAt.Add(time.Minute)) {
		t.Fatalf("after resume: ready %v, schedule-to-start %v; want %v and a minute later", charge.GetReadyTime().AsTime(), charge.GetScheduleToStartDeadline().AsTime(), resumeAt)
	}
	if err := taskstate.Pause(task, "", "operator", resumeAt); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.FailTask(task, "", "operator", resumeAt); err != nil || task.GetPaused() {
		t.Fatalf("fail of a paused task: %v, paused %v; want FAILED, not paused", err, task.GetPaused())
	}
}

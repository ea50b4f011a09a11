package taskstate_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// nap is a sleep of a minute, then a step with a compensation, then one
// that fails the task; a task timeout of an hour.
func nap() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "nap", TaskTimeout: durationpb.New(time.Hour), Steps: []*reevev1.StepSpec{
		{Name: "nap", Sleep: durationpb.New(time.Minute)},
		{Name: "book", Type: "book", DependsOn: []string{"nap"}, Compensation: &reevev1.CompensationSpec{Type: "unbook"}},
		{Name: "pay", Type: "pay", DependsOn: []string{"book"}, Escalation: reevev1.Escalation_ESCALATION_FAIL,
			RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 1}},
	}}
}

func TestSleepWakesOnlyWhenDue(t *testing.T) {
	task := taskstate.New("default", "t", nap(), nil, t0)
	s := taskstate.FindStep(task, "nap")
	if s.GetState() != reevev1.StepState_STEP_STATE_WAITING || !s.GetCompleteBy().AsTime().Equal(t0.Add(time.Minute)) ||
		task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || !task.GetDeadline().AsTime().Equal(t0.Add(time.Hour)) {
		t.Fatalf("task %v, sleep %v until %v, deadline %v", task.GetState(), s.GetState(), s.GetCompleteBy(), task.GetDeadline())
	}
	if a, ok := taskstate.DecideTimer(task, "nap"); !ok || a != taskstate.ActionWake {
		t.Fatalf("decision %v %v, want wake", a, ok)
	}
	if err := taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute-time.Millisecond)); !errors.Is(err, taskstate.ErrNotExpired) {
		t.Fatalf("early wake: %v", err)
	}
	if err := taskstate.Wake(task, "nap", 2, "supervisor/x", t0.Add(time.Minute)); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("wake of another attempt: %v", err)
	}
	if err := taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED || s.GetCompleteBy() != nil || !taskstate.Queued(taskstate.FindStep(task, "book")) {
		t.Fatalf("after the wake: %v, book %v", s, taskstate.FindStep(task, "book"))
	}
	if err := taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute)); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("second wake: %v", err)
	}
}

func TestDelayedStartStartsOnce(t *testing.T) {
	start := t0.Add(time.Hour)
	task := taskstate.NewAt("default", "t", nap(), nil, t0, start, 2*time.Hour)
	if at, ok := taskstate.AwaitingStart(task); !ok || !at.Equal(start) || task.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Fatalf("awaiting start %v %v, task %v", at, ok, task.GetState())
	}
	if !task.GetDeadline().AsTime().Equal(start.Add(2 * time.Hour)) {
		t.Fatalf("deadline %v, want the start plus the timeout", task.GetDeadline())
	}
	if err := taskstate.StartTask(task, "supervisor/x", start.Add(-time.Second)); !errors.Is(err, taskstate.ErrNotExpired) {
		t.Fatalf("early start: %v", err)
	}
	if err := taskstate.StartTask(task, "supervisor/x", start); err != nil {
		t.Fatal(err)
	}
	if s := taskstate.FindStep(task, "nap"); s.GetState() != reevev1.StepState_STEP_STATE_WAITING || !s.GetReadyTime().AsTime().Equal(start) {
		t.Fatalf("after the start: %v", s)
	}
	if _, ok := taskstate.AwaitingStart(task); ok {
		t.Fatal("still awaiting its start")
	}
	if err := taskstate.StartTask(task, "supervisor/x", start); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("second start: %v", err)
	}
}

// Past its deadline a task is compensated (its workflow declares a
// compensation) or failed; a COMPENSATING one is past it; an operator's
// retry of the FAILED task drops the passed deadline.
func TestTaskDeadline(t *testing.T) {
	task := taskstate.New("default", "t", nap(), nil, t0)
	_ = taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute))
	book := run(t, task, "book", t0.Add(time.Minute))
	if err := taskstate.Complete(task, book, "a", nil, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	run(t, task, "pay", t0.Add(2*time.Minute))
	due := t0.Add(time.Hour)
	if err := taskstate.ExpireTask(task, taskstate.ActionCompensate, "", "supervisor/x", due.Add(-time.Nanosecond)); !errors.Is(err, taskstate.ErrNotExpired) {
		t.Fatalf("early: %v", err)
	}
	a, _ := taskstate.DecideTimer(task, taskstate.DeadlineMark)
	if a != taskstate.ActionCompensate {
		t.Fatalf("decision %v, want compensate", a)
	}
	if err := taskstate.ExpireTask(task, a, "", "supervisor/x", due); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING || taskstate.FindStep(task, "pay").GetState() != reevev1.StepState_STEP_STATE_CANCELED {
		t.Fatalf("task %v (%s), pay %v", task.GetState(), task.GetReason(), taskstate.FindStep(task, "pay").GetState())
	}
	if _, ok := taskstate.TaskDeadline(task); ok {
		t.Fatal("a COMPENSATING task's deadline is in force")
	}
	if err := taskstate.ExpireTask(task, a, "", "supervisor/x", due); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("again while compensating: %v", err)
	}

	// Without a compensation: failed; retried by an operator, without the
	// deadline that passed.
	wf := nap()
	wf.Steps[1].Compensation = nil
	task = taskstate.New("default", "t2", wf, nil, t0)
	_ = taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute))
	if err := taskstate.ExpireTask(task, taskstate.ActionFail, "", "supervisor/x", due); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || task.GetReason()[:len("task_timeout: ")] != "task_timeout: " {
		t.Fatalf("task %v %q", task.GetState(), task.GetReason())
	}
	if err := taskstate.RetryFailed(task, "book", 0, "", "operator", due.Add(time.Minute)); err == nil {
		t.Fatal("retry of a step that did not fail")
	}
	// The canceled book step is not FAILED: the operator compensates or
	// reruns such a task; a task failed by a step is retried as before.
	task = taskstate.New("default", "t3", wf, nil, t0)
	_ = taskstate.Wake(task, "nap", 1, "supervisor/x", t0.Add(time.Minute))
	ref := run(t, task, "book", t0.Add(time.Minute))
	if err := taskstate.Fail(task, ref, "a", &reevev1.StepError{Message: "no", NonRetryable: true}, due.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v", task.GetState())
	}
	if err := taskstate.RetryFailed(task, "book", 0, "", "operator", due.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if task.GetDeadline() != nil || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("retried task %v with deadline %v, want RUNNING without the passed deadline", task.GetState(), task.GetDeadline())
	}
}

func TestRerunGetsTheWorkflowsTaskTimeout(t *testing.T) {
	task := taskstate.New("default", "t", nap(), nil, t0)
	_ = taskstate.FailTask(task, "", "operator", t0.Add(time.Minute))
	later := t0.Add(48 * time.Hour)
	again, err := taskstate.Rerun(task, "t-again", "nap", nil, "", "operator", later)
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetDeadline().AsTime().Equal(later.Add(time.Hour)) {
		t.Fatalf("rerun deadline %v, want its creation plus an hour", again.GetDeadline())
	}
}

package client_test

import (
	"testing"
	"time"

	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// WithStartIn and WithTaskTimeout reach the task: it waits to start, with
// its deadline counted from its start, and can be canceled meanwhile.
func TestSubmitWithStartInAndTaskTimeout(t *testing.T) {
	e := newEnv(t, nil)
	e.register(t, &reevev1.Workflow{Name: "later", Steps: []*reevev1.StepSpec{step("a", "t")}})
	before := time.Now()
	run, err := e.c.Submit(ctx(t), "later", nil, client.WithStartIn(time.Hour), client.WithTaskTimeout(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	task, err := run.Task(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	start := task.GetStartTime().AsTime()
	if task.GetState() != reevev1.TaskState_TASK_STATE_PENDING || start.Before(before.Add(time.Hour)) || start.After(time.Now().Add(time.Hour)) {
		t.Fatalf("task %v start %v, want PENDING starting in an hour", task.GetState(), start)
	}
	if d := task.GetDeadline().AsTime().Sub(start); d != 2*time.Hour {
		t.Fatalf("deadline %v after the start, want 2h", d)
	}
	if task.GetSteps()[0].GetReadyTime() != nil {
		t.Fatal("a step is ready before the start")
	}
	if task, err = run.Cancel(ctx(t), "not needed"); err != nil || task.GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("cancel: %v %v", task.GetState(), err)
	}
	at := time.Now().Add(-time.Minute)
	run, err = e.c.Submit(ctx(t), "later", nil, client.WithStartTime(at))
	if err != nil {
		t.Fatal(err)
	}
	if task, _ = run.Task(ctx(t)); task.GetStartTime() != nil || task.GetSteps()[0].GetReadyTime() == nil {
		t.Fatalf("a start in the past: start %v, step %v; want it started at once", task.GetStartTime(), task.GetSteps()[0])
	}
}

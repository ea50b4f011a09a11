package taskstate_test

import (
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A CANCELED task has work left to undo when a forward step succeeded, or
// when a compensation was interrupted; not when nothing ran, nor once every
// success was compensated.
func TestLeftToUndo(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, task *reevev1.Task)
		want bool
	}{
		{"canceled before any step ran", func(t *testing.T, task *reevev1.Task) {}, false},
		{"canceled while the first step ran", func(t *testing.T, task *reevev1.Task) { run(t, task, "reserve", t0) }, false},
		{"canceled after a success", func(t *testing.T, task *reevev1.Task) {
			if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"canceled while the only success was being compensated", func(t *testing.T, task *reevev1.Task) {
			if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
				t.Fatal(err)
			}
			taskstate.Spec(task, "charge").Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
			if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
				t.Fatal(err)
			}
			run(t, task, "reserve", t0) // its compensation, dispatched
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := taskstate.New("default", "t", orders(), nil, t0)
			c.run(t, task)
			if err := taskstate.Cancel(task, "", "test", false, t0); err != nil {
				t.Fatal(err)
			}
			if got := taskstate.LeftToUndo(task); got != c.want {
				t.Errorf("LeftToUndo = %v, want %v (steps %v)", got, c.want, states(task))
			}
		})
	}
	t.Run("compensated", func(t *testing.T) {
		task := taskstate.New("default", "t", orders(), nil, t0)
		if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
		taskstate.Spec(task, "charge").Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
		if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
			t.Fatal(err)
		}
		if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || taskstate.LeftToUndo(task) {
			t.Errorf("task %v, LeftToUndo %v; want COMPENSATED, false", task.GetState(), taskstate.LeftToUndo(task))
		}
	})
}

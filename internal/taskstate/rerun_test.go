package taskstate_test

import (
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A rerun keeps the outputs of the steps that succeeded and are not
// downstream of the step it runs from; a step that was undone runs again,
// so a rerun of a COMPENSATED task runs everything again.
func TestRerunKeepsWhatSucceededUpstream(t *testing.T) {
	succeeded := taskIn(t, "SUCCEEDED")
	later := t0.Add(time.Hour)
	for _, c := range []struct {
		old        *reevev1.Task
		from       string
		kept, runs []string // runs: the steps queued at once
	}{
		{succeeded, "ship", []string{"reserve", "charge"}, []string{"ship"}},
		{succeeded, "charge", []string{"reserve"}, []string{"charge"}},
		{succeeded, "reserve", nil, []string{"reserve"}},
		{taskIn(t, "COMPENSATED"), "ship", nil, []string{"reserve"}},
	} {
		nt, err := taskstate.Rerun(c.old, "new", c.from, nil, "", "operator", later)
		if err != nil {
			t.Fatal(err)
		}
		if nt.GetRerunOf() != "t-1" || nt.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
			t.Fatalf("from %s: rerun_of %q, state %v", c.from, nt.GetRerunOf(), nt.GetState())
		}
		for _, name := range c.kept {
			if s := taskstate.FindStep(nt, name); s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
				t.Errorf("%s task from %s: %s is %v, want kept SUCCEEDED", c.old.GetState(), c.from, name, s.GetState())
			}
		}
		for _, name := range c.runs {
			if s := taskstate.FindStep(nt, name); !taskstate.Queued(s) || s.GetAttempt() != 1 {
				t.Errorf("%s task from %s: %s is %v attempt %d, want queued, attempt 1", c.old.GetState(), c.from, name, s.GetState(), s.GetAttempt())
			}
		}
	}
	if _, err := taskstate.Rerun(taskIn(t, "RUNNING"), "new", "ship", nil, "", "operator", later); err == nil {
		t.Fatal("rerun of a RUNNING task accepted")
	}
	if _, err := taskstate.Rerun(succeeded, "new", "nope", nil, "", "operator", later); err == nil {
		t.Fatal("rerun from an unknown step accepted")
	}
}

package taskstate_test

import (
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A step that fails for good escalates as it says; when it says nothing, a
// workflow that declares any compensation (a saga) undoes what succeeded,
// and one that declares none fails the task for an operator.
func TestPermanentFailureEscalation(t *testing.T) {
	cases := []struct {
		name       string
		saga       bool
		escalation reevev1.Escalation
		task       reevev1.TaskState
		reserve    reevev1.StepState // the succeeded upstream step
	}{
		{"saga, unset: compensates", true, 0, reevev1.TaskState_TASK_STATE_COMPENSATING, reevev1.StepState_STEP_STATE_COMPENSATING},
		{"saga, compensate", true, reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.TaskState_TASK_STATE_COMPENSATING, reevev1.StepState_STEP_STATE_COMPENSATING},
		{"saga, fail: an operator decides", true, reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"saga, wait then retry", true, reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"no compensation, unset: fails", false, 0, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"no compensation, fail", false, reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wf := &reevev1.Workflow{Name: "trip", Steps: []*reevev1.StepSpec{
				{Name: "reserve", Type: "inv.reserve"},
				{Name: "charge", Type: "pay.charge", DependsOn: []string{"reserve"}, Escalation: tc.escalation},
			}}
			if tc.saga {
				wf.Steps[0].Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
			}
			task := taskstate.New("default", "t", wf, nil, t0)
			if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
				t.Fatal(err)
			}
			declined := &reevev1.StepError{Code: "card_declined", Message: "insufficient funds", NonRetryable: true}
			if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", declined, t0); err != nil {
				t.Fatal(err)
			}
			if task.GetState() != tc.task || taskstate.FindStep(task, "reserve").GetState() != tc.reserve {
				t.Fatalf("task %v, reserve %v; want %v, %v", task.GetState(), taskstate.FindStep(task, "reserve").GetState(), tc.task, tc.reserve)
			}
		})
	}
}

package taskstate_test

import (
	"fmt"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// BenchmarkOneStepLifecycle is the pure state machine cost of a one-step
// task: create, claim, complete.
func BenchmarkOneStepLifecycle(b *testing.B) {
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t"}}}
	b.ReportAllocs()
	for b.Loop() {
		task := taskstate.New("default", "t", wf, nil, t0)
		if err := taskstate.Claim(task, "a", 1, "s1", "agent", t0); err != nil {
			b.Fatal(err)
		}
		ref := &reevev1.StepRef{Namespace: "default", TaskId: "t", Step: "a", Attempt: 1}
		if err := taskstate.Complete(task, ref, "agent", nil, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompensation is the cost of failing the last of three steps and
// compensating the other two.
func BenchmarkCompensation(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		task := taskstate.New("default", "t", orders(), nil, t0)
		for _, name := range []string{"reserve", "charge"} {
			s := taskstate.FindStep(task, name)
			_ = taskstate.Claim(task, name, s.GetAttempt(), "s1", "a", t0)
			_ = taskstate.Complete(task, taskstate.Ref(task, s), "a", nil, t0)
		}
		ship := taskstate.FindStep(task, "ship")
		_ = taskstate.Claim(task, "ship", 1, "s1", "a", t0)
		_ = taskstate.Fail(task, taskstate.Ref(task, ship), "a", &reevev1.StepError{NonRetryable: true}, t0)
		for _, name := range []string{"charge", "reserve"} {
			s := taskstate.FindStep(task, name)
			_ = taskstate.Claim(task, name, s.GetAttempt(), "s1", "a", t0)
			_ = taskstate.Complete(task, taskstate.Ref(task, s), "a", nil, t0)
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
			b.Fatalf("state %v", task.GetState())
		}
	}
}

// BenchmarkCompensationChain100 undoes a chain of 100 steps (the step
// limit), every other one with a compensation: each compensation result
// looks at what is still to be undone upstream.
func BenchmarkCompensationChain100(b *testing.B) {
	wf := &reevev1.Workflow{Name: "chain"}
	for i := range 100 {
		sp := &reevev1.StepSpec{Name: fmt.Sprintf("s%d", i), Type: "t", Escalation: reevev1.Escalation_ESCALATION_COMPENSATE}
		if i > 0 {
			sp.DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
		if i%2 == 0 {
			sp.Compensation = &reevev1.CompensationSpec{Type: "undo"}
		}
		wf.Steps = append(wf.Steps, sp)
	}
	b.ReportAllocs()
	for b.Loop() {
		task := taskstate.New("default", "t", wf, nil, t0)
		for i := range 99 {
			s := task.GetSteps()[i]
			_ = taskstate.Claim(task, s.GetName(), s.GetAttempt(), "s1", "a", t0)
			_ = taskstate.Complete(task, taskstate.Ref(task, s), "a", nil, t0)
		}
		last := task.GetSteps()[99]
		_ = taskstate.Claim(task, last.GetName(), last.GetAttempt(), "s1", "a", t0)
		_ = taskstate.Fail(task, taskstate.Ref(task, last), "a", &reevev1.StepError{NonRetryable: true}, t0)
		for i := 98; i >= 0; i -= 2 {
			s := task.GetSteps()[i]
			if err := taskstate.Claim(task, s.GetName(), s.GetAttempt(), "s1", "a", t0); err != nil {
				b.Fatalf("claim %s: %v", s.GetName(), err)
			}
			_ = taskstate.Complete(task, taskstate.Ref(task, s), "a", nil, t0)
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
			b.Fatalf("state %v", task.GetState())
		}
	}
}

package scheduler_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A task waiting for its workflow key's slot (issue 36) starts none of its
// waits or sleeps (issue 35): its approval is not requested and its
// complete-by does not run until it has the slot; admitted, its wait
// begins then, and it is completed as usual.
func TestWaitStartsWhenTheTaskHasItsKeySlot(t *testing.T) {
	_, _, c := newEnv(t)
	approve := &reevev1.StepSpec{Name: "approve", WaitFor: "external", Timeout: durationpb.New(time.Hour)}
	nap := &reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(time.Hour)}
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
		Steps:       []*reevev1.StepSpec{approve, nap}}}
	in := testenv.Value(t, map[string]any{"customer": "c1"})
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "first", Workflow: wf, Input: in})
	// It takes the free slot (at once, or by its admission once the
	// scheduler has read its keys) and its waits begin.
	pollTask(t, c, "", "first", func(t *reevev1.Task) bool {
		return t.GetKeySlot() != 0 && stepOf(t, "approve").GetState() == reevev1.StepState_STEP_STATE_WAITING &&
			stepOf(t, "nap").GetState() == reevev1.StepState_STEP_STATE_WAITING
	})
	second := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "second", Workflow: wf, Input: in})
	if second.GetState() != reevev1.TaskState_TASK_STATE_PENDING || second.GetKeySlot() != 0 {
		t.Fatalf("second task %s with key slot %d; want PENDING without a slot", second.GetState(), second.GetKeySlot())
	}
	for _, st := range second.GetSteps() {
		if st.GetState() == reevev1.StepState_STEP_STATE_WAITING || st.GetCompleteBy() != nil {
			t.Fatalf("step %s of the task waiting for its slot: %v; want no wait begun", st.GetName(), st)
		}
	}
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "second", Step: "approve", Outcome: output("early")}); err == nil {
		t.Fatal("completed a step of a task waiting for its key's slot")
	}
	// The first ends: the second has the slot and its waits begin.
	if _, err := c.CancelTask(t.Context(), &reevev1.CancelTaskRequest{TaskId: "first", Reason: "done with it"}); err != nil {
		t.Fatal(err)
	}
	pollTask(t, c, "", "second", func(t *reevev1.Task) bool {
		return t.GetKeySlot() != 0 && stepOf(t, "approve").GetState() == reevev1.StepState_STEP_STATE_WAITING &&
			stepOf(t, "nap").GetState() == reevev1.StepState_STEP_STATE_WAITING
	})
	got := getTask(t, c, "second")
	if got.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || stepOf(got, "approve").GetCompleteBy() == nil {
		t.Fatalf("admitted task %s, approve %v; want RUNNING with a complete-by", got.GetState(), stepOf(got, "approve"))
	}
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "second", Step: "approve", Outcome: output("ok")})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("complete: %v, %v", resp, err)
	}
}

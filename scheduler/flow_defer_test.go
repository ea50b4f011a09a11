package scheduler_test

import (
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A step its agent deferred (issue 35) holds no max_running slot (issue
// 36): with a limit of 1 the next step of the type is dispatched while the
// deferred one waits for its completion, and the slot key is gone.
func TestDeferredStepFreesItsMaxRunningSlot(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "pay", MaxRunning: 1})
	waitApplied(t, q, "pay", 1)
	slots := watchSlots(t, env, "pay")
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "pay"))
	for _, id := range []string{"t1", "t2"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("pay", "pay"))})
	}
	first := agent.NextAssignment(wait)
	// At its limit: the other task's step waits.
	agent.Quiet(300 * time.Millisecond)
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: first.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{Reason: "waiting for the bank's webhook"}}}}})
	if ack := agent.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatalf("deferral: %v", ack)
	}
	second := agent.NextAssignment(wait)
	if second.GetRef().GetTaskId() == first.GetRef().GetTaskId() {
		t.Fatalf("second assignment %v", second.GetRef())
	}
	if p := stepOf(getTask(t, c, first.GetRef().GetTaskId()), "pay"); !p.GetDeferred() || p.GetState() != reevev1.StepState_STEP_STATE_RUNNING {
		t.Fatalf("first step %v, want RUNNING and deferred", p)
	}
	// Both end: the deferred one by its token, the other by its agent.
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Token: first.GetCompletionToken(), Outcome: output("paid")}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	agent.Succeed(second.GetRef(), nil)
	waitStates(t, c, []string{"t1", "t2"}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	if got := slots.most(); got > 1 {
		t.Errorf("%d slots held at once, never more than 1 allowed", got)
	}
}

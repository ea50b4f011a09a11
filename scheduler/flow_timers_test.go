package scheduler_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// A task waiting to start holds no slot of its workflow's concurrency key
// (issue 35 × issue 36): a customer's task starting in an hour does not
// hold back the task submitted after it to run now; at its start it takes
// a slot as any task does, in turn.
func TestDelayedStartHoldsNoWorkflowKeySlot(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(50*time.Millisecond))
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
		Steps:       []*reevev1.StepSpec{{Name: "charge", Type: "pay", Timeout: durationpb.New(10 * time.Second)}}}}
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "pay"))
	in := testenv.Value(t, map[string]any{"customer": "c1"})
	later := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "later", Workflow: wf, Input: in, StartTime: timestamppb.New(time.Now().Add(1500 * time.Millisecond))})
	if later.GetKeySlot() != 0 {
		t.Fatalf("the task waiting to start took slot %d of its key", later.GetKeySlot())
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "now", Workflow: wf, Input: in})
	as := a.NextAssignment(wait)
	if as.GetRef().GetTaskId() != "now" {
		t.Fatalf("assigned %v, want the task submitted to run now", as.GetRef())
	}
	// "later" starts while "now" holds the key's slot: it waits its turn.
	pollTask(t, c, "", "later", func(t *reevev1.Task) bool { return stepOf(t, "charge").GetReadyTime() != nil })
	a.Quiet(200 * time.Millisecond)
	a.Succeed(as.GetRef(), nil)
	next := a.NextAssignment(wait)
	if next.GetRef().GetTaskId() != "later" {
		t.Fatalf("assigned %v, want later", next.GetRef())
	}
	a.Succeed(next.GetRef(), nil)
	waitStates(t, c, []string{"now", "later"}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
}

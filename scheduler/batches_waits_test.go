package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Batch jobs act on tasks that wait as the operator's calls do: a pause
// applies to a task whose step waits for a completion, one handed off by
// its agent, one waiting to start, one sleeping; a cancel ends each wait and leaves no
// waiting or deadline key.
func TestBatchPausesAndCancelsTasksThatWait(t *testing.T) {
	env, s, c := newEnv(t)
	b := reevev1.NewBatchServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "pay", "ship"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "w-waiting", Workflow: approvalFlow(time.Hour, nil)})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "w-waiting", waitingAt(1))
	pay := step("pay", "pay")
	pay.Timeout = durationpb.New(time.Hour)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "w-deferred", Workflow: inline(pay, step("ship", "ship", "pay"))})
	deferStep(t, agent, agent.NextAssignment(wait))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "w-later", Workflow: inline(step("x", "ship")), StartTime: timestamppb.New(time.Now().Add(time.Hour)),
		TaskTimeout: durationpb.New(time.Hour)})
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "w-sleeps", Workflow: inline(&reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(time.Hour)}, step("after", "ship", "nap"))})
	ids := []string{"w-waiting", "w-deferred", "w-later", "w-sleeps"}

	run := func(action reevev1.BatchAction) *reevev1.BatchJob {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		resp, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{Action: action, Reason: "test", Filter: &reevev1.TaskFilter{TaskIdPrefix: "w-"}})
		if err != nil {
			t.Fatal(err)
		}
		j := waitBatch(t, b, resp.GetJob().GetId())
		if j.GetState() != reevev1.BatchState_BATCH_STATE_SUCCEEDED || j.GetApplied() != int64(len(ids)) {
			t.Fatalf("%v job %v: want every task applied", action, j)
		}
		return j
	}
	run(reevev1.BatchAction_BATCH_ACTION_PAUSE)
	for _, id := range ids {
		if !getTask(t, c, id).GetPaused() {
			t.Fatalf("%s not paused", id)
		}
	}
	run(reevev1.BatchAction_BATCH_ACTION_CANCEL)
	for _, id := range ids {
		if st := getTask(t, c, id).GetState(); st != reevev1.TaskState_TASK_STATE_CANCELED && st != reevev1.TaskState_TASK_STATE_COMPENSATING {
			t.Fatalf("%s is %v after the cancel", id, st)
		}
		if n := keysOfTask(t, env, "/reeve/waiting/", id); n != 0 {
			t.Fatalf("%s: %d waiting keys after the cancel", id, n)
		}
	}
	for _, id := range []string{"w-deferred", "w-later", "w-sleeps"} {
		if n := keysOfTask(t, env, "/reeve/deadlines/", id); n != 0 {
			t.Fatalf("%s: %d deadline keys after the cancel", id, n)
		}
	}
}

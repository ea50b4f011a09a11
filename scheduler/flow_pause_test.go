package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A paused queue with a limit: the running attempt goes on and its result
// is taken, none starts while paused, and resumed the limit still holds
// (two start, not three). A queued step's schedule-to-start timeout keeps
// running while its queue is paused (documented): it is recovered.
func TestPausedQueueWithLimitAndScheduleToStart(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s})
	q := queues(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 2})
	waitApplied(t, q, "erp", 2)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	first := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
	running := a.NextAssignment(wait)
	if _, err := q.PauseQueue(ctx, &reevev1.PauseQueueRequest{Type: "erp"}); err != nil {
		t.Fatal(err)
	}
	waitPaused(t, q, "erp")
	var ids []string
	for range 3 {
		ids = append(ids, submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId())
	}
	timed := step("a", "erp")
	timed.ScheduleToStartTimeout = durationpb.New(500 * time.Millisecond)
	timed.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
	expiring := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(timed)}).GetId()
	for deadline := time.Now().Add(wait); stepOf(getTask(t, c, ids[0]), "a").GetWaitReason() != "waiting: queue erp is paused"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("wait reason %q", stepOf(getTask(t, c, ids[0]), "a").GetWaitReason())
		}
	}
	if ack := a.Succeed(running.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result while paused: %v", ack)
	}
	waitStates(t, c, []string{first}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	// The schedule-to-start timeout runs while paused.
	waitStates(t, c, []string{expiring}, reevev1.TaskState_TASK_STATE_FAILED, wait)
	a.Quiet(200 * time.Millisecond)
	waitFlowKeys(t, env, 0, "paused, nothing running")

	if _, err := q.ResumeQueue(ctx, &reevev1.ResumeQueueRequest{Type: "erp"}); err != nil {
		t.Fatal(err)
	}
	one, two := a.NextAssignment(wait), a.NextAssignment(wait)
	a.Quiet(300 * time.Millisecond) // the limit, 2, holds after the resume
	waitFlowKeys(t, env, 2, "resumed")
	a.Succeed(one.GetRef(), nil)
	a.Succeed(two.GetRef(), nil)
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	waitStates(t, c, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "all ended")
	verifyClean(t, env)
}

// waitPaused waits until the scheduler behind q applies the pause of typ
// (a submission right after PauseQueue may be claimed by a scheduler whose
// watch has not delivered it yet: the pause applies within a second).
func waitPaused(t *testing.T, q reevev1.QueueServiceClient, typ string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
		cancel()
		if err != nil {
			t.Fatalf("list queues: %v", err)
		}
		for _, qu := range resp.GetQueues() {
			if qu.GetType() == typ && qu.GetApplied() && qu.GetConfig().GetPaused() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause of %s not applied after %s: %v", typ, wait, resp.GetQueues())
		}
	}
}

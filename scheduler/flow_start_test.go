package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A task waiting for its start time (issue 35) neither holds nor waits for
// a slot of its workflow's concurrency key (issue 36): a task of the key
// submitted after it but due now runs at once. At its start time it joins
// the key's queue like a task submitted then: it waits while the key is
// full, and runs when a slot frees.
func TestDelayedStartHoldsNoKeySlot(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s})
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
		Steps:       []*reevev1.StepSpec{step("a", "x")}}}
	in := testenv.Value(t, map[string]any{"customer": "c1"})
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "x"))
	startAt := time.Now().Add(time.Second)
	later := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "later", Workflow: wf, Input: in, StartTime: timestamppb.New(startAt)})
	if later.GetKeySlot() != 0 {
		t.Errorf("a task waiting for its start holds key slot %d", later.GetKeySlot())
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "now", Workflow: wf, Input: in})
	first := a.NextAssignment(wait)
	if first.GetRef().GetTaskId() != "now" {
		t.Fatalf("assigned %v; want task now's step", first.GetRef())
	}
	// Past its start time it waits for the key, which "now" holds.
	a.Quiet(time.Until(startAt) + 500*time.Millisecond)
	got := getTask(t, c, "later")
	if got.GetState() != reevev1.TaskState_TASK_STATE_PENDING || got.GetKeySlot() != 0 {
		t.Fatalf("later: %s with key slot %d; want PENDING waiting for its key", got.GetState(), got.GetKeySlot())
	}
	if why := stepOf(got, "a").GetWaitReason(); why != `waiting: concurrency key "c1" of workflow orders is at its limit 1/1` {
		t.Errorf("later's wait reason %q", why)
	}
	a.Succeed(first.GetRef(), nil)
	second := a.NextAssignment(wait)
	if second.GetRef().GetTaskId() != "later" {
		t.Fatalf("assigned %v; want task later's step", second.GetRef())
	}
	a.Succeed(second.GetRef(), nil)
	waitStates(t, c, []string{"now", "later"}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "both ended")
	verifyClean(t, env)
}

// WatchTask sets Step.wait_reason as GetTask does.
func TestWatchTaskSaysWhyAStepWaits(t *testing.T) {
	_, s, c := newEnv(t)
	q := queues(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := q.PauseQueue(ctx, &reevev1.PauseQueueRequest{Type: "erp"}); err != nil {
		t.Fatal(err)
	}
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
	const why = "waiting: queue erp is paused"
	for deadline := time.Now().Add(wait); stepOf(getTask(t, c, id), "a").GetWaitReason() != why; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GetTask: wait reason %q", stepOf(getTask(t, c, id), "a").GetWaitReason())
		}
	}
	stream, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := stepOf(resp.GetTask(), "a").GetWaitReason(); got != why {
		t.Errorf("WatchTask: wait reason %q; want %q", got, why)
	}
}

package scheduler_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A workflow concurrency key with two schedulers: a task holding the key's
// slot that ends by its task timeout, by a cancel while running, or that
// times out while it waits, frees (or never takes) the slot, and the oldest
// waiting task is admitted, whichever scheduler it was submitted to.
func TestWorkflowKeyFreedByEveryTaskEnd(t *testing.T) {
	env, s1, c1 := newEnv(t)
	s2 := env.StartScheduler("")
	c2 := s2.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s1, s2})
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
		Steps:       []*reevev1.StepSpec{step("a", "x")}}}
	in := testenv.Value(t, map[string]any{"customer": "c1"})
	// The agent serves s2; tasks are submitted to both schedulers, and
	// either may admit a waiting one.
	a := testenv.ConnectRaw(t, s2.Addr, register("a", 10, "x"))
	next := func() *reevev1.StepAssignment { t.Helper(); return a.NextAssignment(wait) }
	// t1 holds the slot and times out; t2 (on s2) and t3 wait; t4 waits
	// with a short task timeout of its own.
	submit(t, c1, &reevev1.SubmitTaskRequest{TaskId: "t1", Workflow: wf, Input: in, TaskTimeout: durationpb.New(1500 * time.Millisecond)})
	if as := next(); as.GetRef().GetTaskId() != "t1" {
		t.Fatalf("assigned %v; want t1", as.GetRef())
	}
	submit(t, c2, &reevev1.SubmitTaskRequest{TaskId: "t2", Workflow: wf, Input: in})
	submit(t, c1, &reevev1.SubmitTaskRequest{TaskId: "t3", Workflow: wf, Input: in})
	submit(t, c2, &reevev1.SubmitTaskRequest{TaskId: "t4", Workflow: wf, Input: in, TaskTimeout: durationpb.New(time.Second)})
	waitStates(t, c1, []string{"t4"}, reevev1.TaskState_TASK_STATE_FAILED, wait)
	waitStates(t, c1, []string{"t1"}, reevev1.TaskState_TASK_STATE_FAILED, wait)
	as := next()
	if as.GetRef().GetTaskId() != "t2" {
		t.Fatalf("assigned %v after t1 timed out; want t2, the oldest waiting", as.GetRef())
	}
	if _, err := c2.CancelTask(context.Background(), &reevev1.CancelTaskRequest{TaskId: "t2", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	as = next()
	if as.GetRef().GetTaskId() != "t3" {
		t.Fatalf("assigned %v after t2 was canceled; want t3", as.GetRef())
	}
	if got := getTask(t, c1, "t4").GetKeySlot(); got != 0 {
		t.Errorf("t4, timed out while waiting, has key slot %d", got)
	}
	a.Succeed(as.GetRef(), nil)
	waitStates(t, c1, []string{"t3"}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	for _, p := range []string{"/reeve/taskslots/", "/reeve/keywait/"} {
		resp, err := env.Etcd.Client().Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("%s: %d keys left (%v); want none", p, resp.Count, err)
		}
	}
	verifyClean(t, env)
}

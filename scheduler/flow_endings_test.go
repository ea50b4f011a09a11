package scheduler_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/verify"
	"github.com/reeve-org/reeve/scheduler"
)

// Review of issue 36 × every way an attempt ends: with max_running 1 on
// its type, an attempt holds the one slot while it runs; however it ends
// the slot key is gone and the slot is reused by the next step, and
// `reeve verify` finds no limit_exceeded and no orphan key.

// flowKeys returns the slot keys held in etcd: max_running slots and
// concurrency-key slots of steps.
func flowKeys(t *testing.T, env *testenv.Env) []string {
	t.Helper()
	var out []string
	for _, p := range []string{"/reeve/slots/", "/reeve/keyslots/"} {
		resp, err := env.Etcd.Client().Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
	}
	return out
}

// waitFlowKeys waits until n slot keys are held.
func waitFlowKeys(t *testing.T, env *testenv.Env, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := flowKeys(t, env)
		if len(got) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: slot keys %v, want %d", what, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verifyClean runs `reeve verify`'s check and fails on any violation.
func verifyClean(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rep, err := verify.Check(ctx, env.Etcd.Client(), verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("verify: %+v", v)
	}
}

// limitedEnv starts a scheduler (with opts) and a supervisor, with
// max_running 1 on erp.
func limitedEnv(t *testing.T, opts ...scheduler.Option) (*testenv.Env, *testenv.Scheduler, reevev1.SchedulerServiceClient) {
	t.Helper()
	env := testenv.New(t)
	s := env.StartScheduler("", opts...)
	q := queues(t, s)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 1})
	waitApplied(t, q, "erp", 1)
	env.StartSupervisor([]*testenv.Scheduler{s})
	return env, s, s.Client(t)
}

// reuse submits a second task of erp and checks that it gets the slot:
// agent a is assigned its step, which holds slot 1.
func reuse(t *testing.T, env *testenv.Env, c reevev1.SchedulerServiceClient, a *testenv.RawAgent) {
	t.Helper()
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
	for {
		as := a.NextAssignment(wait)
		if as.GetRef().GetTaskId() != id {
			a.Succeed(as.GetRef(), nil) // another attempt of the scenario's task
			continue
		}
		if keys := flowKeys(t, env); len(keys) != 1 || keys[0] != "/reeve/slots/default/erp/000001" {
			t.Errorf("slot keys %v while the next step runs; want slot 1 of erp", keys)
		}
		a.Succeed(as.GetRef(), nil)
		break
	}
	waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "after the next step")
	verifyClean(t, env)
}

func TestMaxRunningSlotFreedByEveryEnding(t *testing.T) {
	ctx := context.Background()
	one := &reevev1.RetryPolicy{MaxAttempts: 1}

	t.Run("cancel", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
		a.NextAssignment(wait)
		waitFlowKeys(t, env, 1, "running")
		if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		waitFlowKeys(t, env, 0, "canceled")
		reuse(t, env, c, a)
	})

	t.Run("pause then result", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"), step("b", "erp", "a"))}).GetId()
		as := a.NextAssignment(wait)
		if _, err := sup.PauseTask(ctx, &reevev1.PauseTaskRequest{TaskId: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		// The running attempt goes on, holding its slot.
		waitFlowKeys(t, env, 1, "paused")
		a.Succeed(as.GetRef(), nil)
		waitFlowKeys(t, env, 0, "paused, ended")
		reuse(t, env, c, a)
		if _, err := sup.ResumeTask(ctx, &reevev1.ResumeTaskRequest{TaskId: id}); err != nil {
			t.Fatal(err)
		}
		a.Succeed(a.NextAssignment(wait).GetRef(), nil)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
		waitFlowKeys(t, env, 0, "resumed, ended")
		verifyClean(t, env)
	})

	t.Run("expiry", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		sp := step("a", "erp")
		sp.Timeout = durationpb.New(300 * time.Millisecond)
		sp.RetryPolicy = one
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
		a.NextAssignment(wait)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_FAILED, wait)
		waitFlowKeys(t, env, 0, "expired")
		reuse(t, env, c, a)
	})

	t.Run("heartbeat missed", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		sp := step("a", "erp")
		sp.HeartbeatTimeout = durationpb.New(300 * time.Millisecond)
		sp.RetryPolicy = one
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
		a.NextAssignment(wait)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_FAILED, wait)
		waitFlowKeys(t, env, 0, "heartbeat missed")
		reuse(t, env, c, a)
	})

	t.Run("take-back", func(t *testing.T) {
		env, s, c := limitedEnv(t, scheduler.WithAckTimeout(300*time.Millisecond))
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))})
		for a.Next(wait).GetAssignment() == nil { // never acknowledged
		}
		waitFlowKeys(t, env, 1, "sent")
		// Taken back: the next attempt goes to b, with the slot.
		b := testenv.ConnectRaw(t, s.Addr, register("b", 4, "erp"))
		as := b.NextAssignment(wait)
		if as.GetRef().GetAttempt() != 2 {
			t.Errorf("attempt %d after the take-back; want 2", as.GetRef().GetAttempt())
		}
		b.Succeed(as.GetRef(), nil)
		waitFlowKeys(t, env, 0, "taken back, then ended")
		reuse(t, env, c, b)
	})

	t.Run("disconnect with reassign", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		sp := step("a", "erp")
		sp.ReassignAfterDisconnect = durationpb.New(300 * time.Millisecond)
		sp.RetryPolicy = one
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
		a.NextAssignment(wait)
		a.Close()
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_FAILED, wait)
		waitFlowKeys(t, env, 0, "disconnected")
		b := testenv.ConnectRaw(t, s.Addr, register("b", 4, "erp"))
		reuse(t, env, c, b)
	})

	t.Run("retry by an operator", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		sp := step("a", "erp")
		sp.RetryPolicy = one
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
		a.Fail(a.NextAssignment(wait).GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true})
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_FAILED, wait)
		waitFlowKeys(t, env, 0, "failed")
		if _, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: id, Step: "a", Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		as := a.NextAssignment(wait)
		waitFlowKeys(t, env, 1, "retried")
		a.Succeed(as.GetRef(), nil)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
		waitFlowKeys(t, env, 0, "retried, ended")
		reuse(t, env, c, a)
	})

	t.Run("task timeout", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		wf := inline(step("a", "erp"))
		wf.InlineWorkflow.TaskTimeout = durationpb.New(time.Second)
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: wf}).GetId()
		a.NextAssignment(wait)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_FAILED, wait)
		waitFlowKeys(t, env, 0, "task timed out")
		reuse(t, env, c, a)
	})

	t.Run("FailTask by an operator", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
		a.NextAssignment(wait)
		waitFlowKeys(t, env, 1, "running")
		if _, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		waitFlowKeys(t, env, 0, "failed by an operator")
		reuse(t, env, c, a)
	})

	t.Run("CompensateTask by an operator", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp", "other", "undo"))
		first := step("c", "other")
		first.Compensation = &reevev1.CompensationSpec{Type: "undo"}
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(first, step("x", "erp", "c"))}).GetId()
		a.Succeed(a.NextAssignment(wait).GetRef(), nil)
		a.NextAssignment(wait) // x, holding the slot
		waitFlowKeys(t, env, 1, "running")
		if _, err := sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		waitFlowKeys(t, env, 0, "compensating")
		// x ended with the task's compensation (c's, of another type,
		// goes on): the next erp step takes the slot, and verify counts x
		// as ended from task.compensating.
		reuse(t, env, c, a)
	})

	t.Run("compensation", func(t *testing.T) {
		env, s, c := limitedEnv(t)
		a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp", "other"))
		first := step("a", "erp")
		first.Compensation = &reevev1.CompensationSpec{Type: "erp"}
		second := step("b", "other", "a")
		second.RetryPolicy = one
		second.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
		id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(first, second)}).GetId()
		a.Succeed(a.NextAssignment(wait).GetRef(), nil)
		a.Fail(a.NextAssignment(wait).GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true})
		comp := a.NextAssignment(wait)
		if !comp.GetCompensation() {
			t.Fatalf("assignment %v; want the compensation of a", comp.GetRef())
		}
		waitFlowKeys(t, env, 1, "compensating")
		a.Succeed(comp.GetRef(), nil)
		waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_COMPENSATED, wait)
		waitFlowKeys(t, env, 0, "compensated")
		reuse(t, env, c, a)
	})
}

// A task that starts compensating cancels its running attempts: the slot
// of one of a limited type is freed by that write, and `reeve verify` does
// not count the canceled attempt as running while the compensations run
// (it used to, and reported the next attempt of the type as over the limit).
func TestMaxRunningSlotFreedWhenTaskCompensates(t *testing.T) {
	env, s, c := limitedEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 8, "erp", "other", "undo"))
	first := step("c", "other")
	first.Compensation = &reevev1.CompensationSpec{Type: "undo"}
	limited := step("x", "erp", "c")
	failing := step("y", "other", "c")
	failing.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
	failing.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(first, limited, failing)}).GetId()
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	var y *reevev1.StepAssignment
	for range 2 {
		if as := a.NextAssignment(wait); as.GetRef().GetStep() == "y" {
			y = as
		}
	}
	waitFlowKeys(t, env, 1, "x running")
	a.Fail(y.GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true})
	// x is canceled with the task's compensation; c's compensation runs on.
	for {
		m := a.Next(wait)
		if as := m.GetAssignment(); as != nil {
			if !as.GetCompensation() {
				t.Fatalf("assignment %v; want the compensation of c", as.GetRef())
			}
			a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
			break
		}
	}
	waitFlowKeys(t, env, 0, "x canceled")
	if got := getTask(t, c, id).GetState(); got != reevev1.TaskState_TASK_STATE_COMPENSATING {
		t.Fatalf("task %s; want COMPENSATING", got)
	}
	reuse(t, env, c, a)
}

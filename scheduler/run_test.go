package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

func TestSubmitRunsOnAgentToSucceeded(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "echo"))
	task := submit(t, c, &reevev1.SubmitTaskRequest{
		TaskId: "t1", Workflow: inline(step("only", "echo")),
		Input: testenv.Value(t, map[string]any{"order_id": "o-1"}),
	})
	// The agent is idle: the task is created with its step claimed.
	if task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || task.GetNamespace() != "default" {
		t.Fatalf("submitted task: state %v namespace %q, want RUNNING (claimed on submit) in default", task.GetState(), task.GetNamespace())
	}

	as := agent.NextAssignment(wait)
	if got := as.GetInput().GetStructValue().GetFields()["order_id"].GetStringValue(); got != "o-1" {
		t.Fatalf("assignment input order_id = %q, want o-1", got)
	}
	if as.GetRef().GetAttempt() != 1 || as.GetIdempotencyKey() == "" || as.GetCompleteBy() == nil {
		t.Fatalf("assignment %v: want attempt 1, an idempotency key and a complete-by", as)
	}
	if ack := agent.Succeed(as.GetRef(), map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}

	final := testenv.WaitTask(t, c, "default", "t1", wait)
	st := stepOf(final, "only")
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || st.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("final task %v step %v, want SUCCEEDED", final.GetState(), st.GetState())
	}
	if !st.GetOutput().GetStructValue().GetFields()["ok"].GetBoolValue() {
		t.Fatalf("step output %v, want ok=true", st.GetOutput())
	}
	if len(final.GetHistory()) < 4 {
		t.Fatalf("history has %d events, want submit, ready, dispatch, success, task success", len(final.GetHistory()))
	}
}

func TestDAGRunsParallelBranchesAndPassesOutputs(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 8, "work"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "dag", Workflow: inline(
		step("a", "work"), step("b", "work", "a"), step("c", "work", "a"), step("d", "work", "b", "c"),
	)})

	a := agent.NextAssignment(wait)
	agent.Succeed(a.GetRef(), map[string]any{"from": "a"})
	// b and c are both dispatched before either finishes: they run in parallel.
	first, second := agent.NextAssignment(wait), agent.NextAssignment(wait)
	got := map[string]bool{first.GetRef().GetStep(): true, second.GetRef().GetStep(): true}
	if !got["b"] || !got["c"] {
		t.Fatalf("parallel branch dispatched %v, want b and c", got)
	}
	if first.GetDependencyOutputs()["a"].GetStructValue().GetFields()["from"].GetStringValue() != "a" {
		t.Fatalf("b/c did not receive a's output: %v", first.GetDependencyOutputs())
	}
	agent.Succeed(first.GetRef(), map[string]any{"from": first.GetRef().GetStep()})
	agent.Quiet(200 * time.Millisecond) // d waits for both branches
	agent.Succeed(second.GetRef(), map[string]any{"from": second.GetRef().GetStep()})

	d := agent.NextAssignment(wait)
	if d.GetRef().GetStep() != "d" || len(d.GetDependencyOutputs()) != 2 ||
		d.GetDependencyOutputs()["b"].GetStructValue().GetFields()["from"].GetStringValue() != "b" ||
		d.GetDependencyOutputs()["c"].GetStructValue().GetFields()["from"].GetStringValue() != "c" {
		t.Fatalf("d assignment %v, want outputs of b and c", d)
	}
	agent.Succeed(d.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "dag", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final state %v", final.GetState())
	}
}

func TestStaleAndDuplicateResultsChangeNothing(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "flaky"))
	spec := step("x", "flaky")
	spec.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: nil}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "stale", Workflow: inline(spec)})

	first := agent.NextAssignment(wait)
	if ack := agent.Fail(first.GetRef(), &reevev1.StepError{Message: "try again"}); !ack.GetAccepted() {
		t.Fatalf("retryable failure refused: %v", ack)
	}
	second := agent.NextAssignment(wait)
	if second.GetRef().GetAttempt() != 2 || second.GetIdempotencyKey() != first.GetIdempotencyKey() {
		t.Fatalf("retry %v, want attempt 2 with the same idempotency key", second.GetRef())
	}

	// A late result of attempt 1 is refused and changes nothing.
	before := getTask(t, c, "stale")
	if ack := agent.Succeed(first.GetRef(), map[string]any{"late": true}); ack.GetAccepted() || ack.GetStatus().GetCode() != int32(codes.FailedPrecondition) {
		t.Fatalf("late result ack %v, want refused with FAILED_PRECONDITION", ack)
	}
	// A result for an attempt that never existed is refused too.
	future := &reevev1.StepRef{Namespace: "default", TaskId: "stale", Step: "x", Attempt: 7}
	if ack := agent.Succeed(future, nil); ack.GetAccepted() {
		t.Fatalf("result for attempt 7 accepted")
	}
	if after := getTask(t, c, "stale"); after.GetUpdateTime().AsTime() != before.GetUpdateTime().AsTime() || stepOf(after, "x").GetState() != reevev1.StepState_STEP_STATE_RUNNING {
		t.Fatalf("refused results changed the task: %v", stepOf(after, "x"))
	}

	if ack := agent.Succeed(second.GetRef(), map[string]any{"attempt": 2}); !ack.GetAccepted() {
		t.Fatalf("current result refused: %v", ack)
	}
	// The same result again is a duplicate: refused, the output stays.
	if ack := agent.Succeed(second.GetRef(), map[string]any{"attempt": "dup"}); ack.GetAccepted() {
		t.Fatalf("duplicate result accepted")
	}
	final := testenv.WaitTask(t, c, "default", "stale", wait)
	x := stepOf(final, "x")
	if x.GetAttempt() != 2 || x.GetFailureCount() != 1 || x.GetOutput().GetStructValue().GetFields()["attempt"].GetNumberValue() != 2 {
		t.Fatalf("step %v, want attempt 2, 1 failure, output of attempt 2", x)
	}
}

func TestResultFromAnotherAgentIsRefused(t *testing.T) {
	_, s, c := newEnv(t)
	owner := testenv.ConnectRaw(t, s.Addr, register("owner", 1, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "forged", Workflow: inline(step("x", "t"))})
	as := owner.NextAssignment(wait)
	rogue := testenv.ConnectRaw(t, s.Addr, register("rogue", 1, "other"))
	if ack := rogue.Succeed(as.GetRef(), nil); ack.GetAccepted() || ack.GetStatus().GetCode() != int32(codes.FailedPrecondition) {
		t.Fatalf("forged result ack %v, want refused", ack)
	}
	if st := stepOf(getTask(t, c, "forged"), "x"); st.GetState() != reevev1.StepState_STEP_STATE_RUNNING {
		t.Fatalf("forged result changed the step to %v", st.GetState())
	}
}

func TestPermanentErrorFailsTask(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "perm", Workflow: inline(step("a", "t"), step("b", "t", "a"))})
	as := agent.NextAssignment(wait)
	agent.Fail(as.GetRef(), &reevev1.StepError{Message: "card declined", Code: "declined", NonRetryable: true})
	final := testenv.WaitTask(t, c, "default", "perm", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_FAILED ||
		stepOf(final, "a").GetState() != reevev1.StepState_STEP_STATE_FAILED ||
		stepOf(final, "b").GetState() != reevev1.StepState_STEP_STATE_SKIPPED ||
		stepOf(final, "a").GetAttempt() != 1 {
		t.Fatalf("task %v a=%v b=%v, want FAILED/FAILED/SKIPPED after one attempt", final.GetState(), stepOf(final, "a"), stepOf(final, "b").GetState())
	}
}

func TestCancelTellsRunningAgentToStop(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "cancel", Workflow: inline(step("a", "t"), step("b", "t", "a"))})
	as := agent.NextAssignment(wait)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "cancel", Reason: "changed my mind"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED || resp.GetTask().GetReason() != "changed my mind" {
		t.Fatalf("cancel returned %v", resp.GetTask())
	}
	var got *reevev1.CancelStep
	for got == nil {
		got = agent.Next(wait).GetCancel()
	}
	if got.GetRef().GetStep() != "a" || got.GetRef().GetAttempt() != as.GetRef().GetAttempt() {
		t.Fatalf("cancel for %v, want a attempt %d", got.GetRef(), as.GetRef().GetAttempt())
	}
	if ack := agent.Succeed(as.GetRef(), nil); ack.GetAccepted() {
		t.Fatalf("result after cancel accepted")
	}
	final := getTask(t, c, "cancel")
	if stepOf(final, "a").GetState() != reevev1.StepState_STEP_STATE_CANCELED || stepOf(final, "b").GetState() != reevev1.StepState_STEP_STATE_SKIPPED {
		t.Fatalf("steps a=%v b=%v, want CANCELED and SKIPPED", stepOf(final, "a").GetState(), stepOf(final, "b").GetState())
	}
	// Canceling again is a no-op.
	if again, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "cancel"}); err != nil || again.GetTask().GetReason() != "changed my mind" {
		t.Fatalf("second cancel: %v %v", again, err)
	}
}

func TestAgentCapacityIsNeverExceeded(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 2, "t"))
	for _, id := range []string{"c1", "c2", "c3"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("x", "t"))})
	}
	a1, a2 := agent.NextAssignment(wait), agent.NextAssignment(wait)
	agent.Quiet(300 * time.Millisecond)
	agent.Succeed(a1.GetRef(), nil)
	a3 := agent.NextAssignment(wait)
	seen := map[string]bool{a1.GetRef().GetTaskId(): true, a2.GetRef().GetTaskId(): true, a3.GetRef().GetTaskId(): true}
	if len(seen) != 3 {
		t.Fatalf("assignments %v, want three different tasks", seen)
	}
}

func getTask(t *testing.T, c reevev1.SchedulerServiceClient, id string) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return resp.GetTask()
}

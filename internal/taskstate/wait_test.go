package taskstate_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// approvals is reserve -> approve (waits for a completion from outside,
// 2 days) -> ship; reserve has a compensation, so the default escalation
// compensates.
func approvals() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "approvals", DefaultRetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 2}, Steps: []*reevev1.StepSpec{
		{Name: "reserve", Type: "inv.reserve", Compensation: &reevev1.CompensationSpec{Type: "inv.release"}},
		{Name: "approve", WaitFor: workflow.WaitExternal, Timeout: durationpb.New(48 * time.Hour), DependsOn: []string{"reserve"}},
		{Name: "ship", Type: "ship.ship", DependsOn: []string{"approve"}},
	}}
}

// waitingTask returns a task whose approve step waits (since t0+1s).
func waitingTask(t *testing.T) *reevev1.Task {
	t.Helper()
	task := taskstate.New("default", "t", approvals(), nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Complete(task, ref, "a", nil, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	return task
}

func TestExternalStepWaitsWhenReady(t *testing.T) {
	task := waitingTask(t)
	s := taskstate.FindStep(task, "approve")
	if !taskstate.Waiting(s) || taskstate.Queued(s) || taskstate.Dispatchable(task, s) || s.GetAttempt() != 1 {
		t.Fatalf("approve: %v, want WAITING (not queued) at attempt 1", s)
	}
	if by, ok := taskstate.Deadline(s); !ok || !by.Equal(t0.Add(time.Second+48*time.Hour)) {
		t.Fatalf("deadline %v %v, want ready + 48h", by, ok)
	}
	if !s.GetWaitStartTime().AsTime().Equal(t0.Add(time.Second)) || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("wait since %v, task %v", s.GetWaitStartTime().AsTime(), task.GetState())
	}
	if h := task.GetHistory(); h[len(h)-1].GetKind() != "step.waiting" {
		t.Fatalf("last event %v, want step.waiting", h[len(h)-1])
	}
}

func TestCompleteFromOutside(t *testing.T) {
	ok := structpb.NewStringValue("approved")
	t.Run("output advances", func(t *testing.T) {
		task := waitingTask(t)
		if err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Output: ok, Actor: "approver/p"}, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		s := taskstate.FindStep(task, "approve")
		if s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED || s.GetOutput().GetStringValue() != "approved" || s.GetCompleteBy() != nil {
			t.Fatalf("approve: %v", s)
		}
		if !taskstate.Queued(taskstate.FindStep(task, "ship")) {
			t.Fatal("ship is not queued after the approval")
		}
		c := taskstate.Completion{Output: structpb.NewStringValue("approved")}
		if !taskstate.Repeated(task, s, c) || !taskstate.Repeated(task, s, taskstate.Completion{Attempt: 1, Output: ok}) {
			t.Fatal("the same completion again is not recognized")
		}
		other := taskstate.Completion{Output: structpb.NewStringValue("other")}
		if taskstate.Repeated(task, s, other) {
			t.Fatal("another output is taken for a repeat")
		}
		if err := taskstate.CompleteFromOutside(task, "approve", other, t0.Add(time.Hour)); !errors.Is(err, taskstate.ErrCompletedOtherwise) {
			t.Fatalf("another output: %v, want ErrCompletedOtherwise", err)
		}
	})
	t.Run("error compensates", func(t *testing.T) {
		task := waitingTask(t)
		err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Error: &reevev1.StepError{Code: "rejected", Message: "no budget"}, Actor: "approver/p"}, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		s := taskstate.FindStep(task, "approve")
		if s.GetState() != reevev1.StepState_STEP_STATE_FAILED || task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
			t.Fatalf("approve %v, task %v: want FAILED and the task compensating (no retry)", s.GetState(), task.GetState())
		}
		if s.GetCompletionState() != reevev1.StepState_STEP_STATE_FAILED || s.GetLastError().GetCode() != "rejected" {
			t.Fatalf("approve: %v", s)
		}
	})
	t.Run("not ready", func(t *testing.T) {
		task := taskstate.New("default", "t", approvals(), nil, t0)
		err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Output: ok}, t0)
		if !errors.Is(err, taskstate.ErrNotWaiting) {
			t.Fatalf("%v, want ErrNotWaiting", err)
		}
	})
	t.Run("replaced attempt", func(t *testing.T) {
		task := waitingTask(t)
		by := t0.Add(time.Second + 48*time.Hour)
		if err := taskstate.RetryExpired(task, "approve", 1, 0, "supervisor/x", by); err != nil {
			t.Fatal(err)
		}
		s := taskstate.FindStep(task, "approve")
		if !taskstate.Waiting(s) || s.GetAttempt() != 2 || !s.GetCompleteBy().AsTime().Equal(by.Add(48*time.Hour)) {
			t.Fatalf("after an expiry's retry: %v, want WAITING at attempt 2 until expiry + 48h", s)
		}
		err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Attempt: 1, Output: ok}, by)
		if !errors.Is(err, taskstate.ErrNotWaiting) {
			t.Fatalf("old attempt: %v, want ErrNotWaiting", err)
		}
		if err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Attempt: 2, Output: ok}, by); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("expiry fails", func(t *testing.T) {
		task := waitingTask(t)
		by := t0.Add(time.Second + 48*time.Hour)
		if err := taskstate.FailExpired(task, "approve", 1, "", "supervisor/x", by); err != nil {
			t.Fatal(err)
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
			t.Fatalf("task %v", task.GetState())
		}
		err := taskstate.CompleteFromOutside(task, "approve", taskstate.Completion{Output: ok}, by)
		if !errors.Is(err, taskstate.ErrTerminal) {
			t.Fatalf("%v, want ErrTerminal", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		task := waitingTask(t)
		if err := taskstate.Cancel(task, "r", "client", false, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		s := taskstate.FindStep(task, "approve")
		if s.GetState() != reevev1.StepState_STEP_STATE_CANCELED || s.GetCompleteBy() != nil {
			t.Fatalf("approve: %v, want CANCELED without a deadline", s)
		}
	})
}

func TestDeferredStep(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Defer(task, ref, "a", "webhook", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "reserve")
	if s.GetState() != reevev1.StepState_STEP_STATE_RUNNING || !s.GetDeferred() || s.GetLockedByAgent() != "" || !taskstate.Awaiting(task, s) {
		t.Fatalf("reserve: %v, want RUNNING, deferred, no agent's", s)
	}
	if err := taskstate.Complete(task, ref, "a", nil, t0.Add(2*time.Second)); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("the agent's result after its deferral: %v, want ErrStale", err)
	}
	if err := taskstate.CompleteFromOutside(task, "reserve", taskstate.Completion{Attempt: ref.GetAttempt(), Output: structpb.NewBoolValue(true)}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED || s.GetDeferred() || !taskstate.Queued(taskstate.FindStep(task, "charge")) {
		t.Fatalf("reserve %v, charge %v", s, taskstate.FindStep(task, "charge"))
	}
}

// A deferred attempt that is not completed before its complete-by expires
// as any: the retry is queued for an agent again, no longer deferred.
func TestDeferredStepExpires(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Defer(task, ref, "a", "", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "reserve")
	by, ok := taskstate.Deadline(s)
	if !ok {
		t.Fatal("a deferred step has no deadline")
	}
	if err := taskstate.ExpireNow(task, "reserve", ref.GetAttempt(), "scheduler/s1", t0.Add(2*time.Second)); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("a missed heartbeat of a deferred step: %v, want ErrStale", err)
	}
	if act, _ := taskstate.Decide(task, s); act != taskstate.ActionRetry {
		t.Fatalf("decision %v, want retry", act)
	}
	if err := taskstate.RetryExpired(task, "reserve", ref.GetAttempt(), 0, "supervisor/x", by); err != nil {
		t.Fatal(err)
	}
	if !taskstate.Queued(s) || s.GetDeferred() || s.GetAttempt() != 2 || s.GetLastError().GetCode() != taskstate.CodeDeadlineExceeded {
		t.Fatalf("after the expiry: %v, want queued at attempt 2, not deferred", s)
	}
	if err := taskstate.CompleteFromOutside(task, "reserve", taskstate.Completion{Attempt: 1, Output: structpb.NewBoolValue(true)}, by); !errors.Is(err, taskstate.ErrNotWaiting) {
		t.Fatalf("the expired attempt's token: %v, want ErrNotWaiting", err)
	}
}

// With wait_then_retry, a rejection escalates to a new round: the step
// waits again (a new attempt, so a new token), and the rejection sent again
// by its token is still recognized as the first.
func TestRejectionWithWaitThenRetryWaitsAgain(t *testing.T) {
	wf := approvals()
	wf.Steps[1].Escalation = reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY
	wf.Steps[1].EscalationWait = durationpb.New(time.Hour)
	task := taskstate.New("default", "t", wf, nil, t0)
	if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	no := taskstate.Completion{Attempt: 1, Error: &reevev1.StepError{Code: "rejected"}}
	if err := taskstate.CompleteFromOutside(task, "approve", no, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "approve")
	if !taskstate.Waiting(s) || s.GetAttempt() != 2 || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("approve %v of a %v task: want WAITING again at attempt 2", s, task.GetState())
	}
	if !taskstate.Repeated(task, s, no) {
		t.Fatal("the rejection sent again by its token is not recognized")
	}
	// By name, the same rejection completes the new wait.
	byName := taskstate.Completion{Error: &reevev1.StepError{Code: "rejected"}}
	if taskstate.Repeated(task, s, byName) {
		t.Fatal("by name, a new wait is taken for a repeat")
	}
}

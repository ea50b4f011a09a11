package taskstate_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

func TestDecide(t *testing.T) {
	cases := []struct {
		name       string
		escalation reevev1.Escalation
		failures   int32
		want       taskstate.Action
		delay      time.Duration
	}{
		{"first expiry retries after initial backoff", 0, 0, taskstate.ActionRetry, time.Second},
		{"second expiry backs off twice as long", 0, 1, taskstate.ActionRetry, 2 * time.Second},
		{"threshold reached compensates by default in a saga", 0, 2, taskstate.ActionCompensate, 0},
		{"threshold reached fails", reevev1.Escalation_ESCALATION_FAIL, 2, taskstate.ActionFail, 0},
		{"threshold reached compensates", reevev1.Escalation_ESCALATION_COMPENSATE, 2, taskstate.ActionCompensate, 0},
		{"threshold reached waits then retries", reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, 2, taskstate.ActionRetry, 10 * time.Minute},
		{"past the threshold keeps waiting", reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, 7, taskstate.ActionRetry, 10 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wf := orders()
			wf.Steps[0].Escalation = tc.escalation
			wf.Steps[0].EscalationWait = durationpb.New(10 * time.Minute)
			wf.Steps[0].RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(time.Second)}
			task := taskstate.New("default", "t", wf, nil, t0)
			s := taskstate.FindStep(task, "reserve")
			s.FailureCount = tc.failures
			action, delay := taskstate.Decide(task, s)
			if action != tc.want || delay != tc.delay {
				t.Fatalf("Decide = %v after %v, want %v after %v", action, delay, tc.want, tc.delay)
			}
		})
	}
}

func TestRetryExpiredQueuesNextAttemptAfterDelay(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	late := t0.Add(2 * time.Minute)
	if err := taskstate.RetryExpired(task, "reserve", ref.GetAttempt(), 5*time.Second, "supervisor/s1", late); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "reserve")
	if !taskstate.Queued(s) || s.GetAttempt() != 2 || s.GetFailureCount() != 1 || !s.GetNotBefore().AsTime().Equal(late.Add(5*time.Second)) {
		t.Fatalf("after expiry: %v", s)
	}
	if err := taskstate.Claim(task, "reserve", 2, "s1", "a", late.Add(time.Second)); err == nil {
		t.Fatal("claimed during the backoff")
	}
}

func TestOperatorRetryResumesFailedTask(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Fail(task, ref, "a", &reevev1.StepError{NonRetryable: true, Message: "down"}, t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v", task.GetState())
	}
	if err := taskstate.RetryFailed(task, "reserve", 0, "fixed the service", "operator", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := states(task)
	s := taskstate.FindStep(task, "reserve")
	if task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || task.GetEndTime() != nil || !taskstate.Queued(s) ||
		s.GetFailureCount() != 0 || s.GetAttempt() != 2 || got["charge"] != reevev1.StepState_STEP_STATE_PENDING {
		t.Fatalf("task %v steps %v reserve %v", task.GetState(), got, s)
	}
	if err := taskstate.Complete(task, run(t, task, "reserve", t0.Add(time.Hour)), "a", nil, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !taskstate.Queued(taskstate.FindStep(task, "charge")) {
		t.Fatal("charge not queued after the retried step succeeded")
	}
}

func TestExpireNowMovesDeadline(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	at := t0.Add(time.Second)
	if err := taskstate.ExpireNow(task, "reserve", ref.GetAttempt(), "scheduler/s1", at); err != nil {
		t.Fatal(err)
	}
	if got := taskstate.FindStep(task, "reserve").GetCompleteBy().AsTime(); !got.Equal(at) {
		t.Fatalf("complete-by %v, want %v", got, at)
	}
}

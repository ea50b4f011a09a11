package taskstate_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// A step that fails for good escalates as it says; when it says nothing, a
// workflow that declares any compensation (a saga) undoes what succeeded,
// and one that declares none fails the task for an operator.
func TestPermanentFailureEscalation(t *testing.T) {
	cases := []struct {
		name       string
		saga       bool
		escalation reevev1.Escalation
		task       reevev1.TaskState
		reserve    reevev1.StepState // the succeeded upstream step
	}{
		{"saga, unset: compensates", true, 0, reevev1.TaskState_TASK_STATE_COMPENSATING, reevev1.StepState_STEP_STATE_COMPENSATING},
		{"saga, compensate", true, reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.TaskState_TASK_STATE_COMPENSATING, reevev1.StepState_STEP_STATE_COMPENSATING},
		{"saga, fail: an operator decides", true, reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"saga, wait then retry", true, reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"no compensation, unset: fails", false, 0, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
		{"no compensation, fail", false, reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_SUCCEEDED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wf := &reevev1.Workflow{Name: "trip", Steps: []*reevev1.StepSpec{
				{Name: "reserve", Type: "inv.reserve"},
				{Name: "charge", Type: "pay.charge", DependsOn: []string{"reserve"}, Escalation: tc.escalation},
			}}
			if tc.saga {
				wf.Steps[0].Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
			}
			task := taskstate.New("default", "t", wf, nil, t0)
			if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
				t.Fatal(err)
			}
			declined := &reevev1.StepError{Code: "card_declined", Message: "insufficient funds", NonRetryable: true}
			if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", declined, t0); err != nil {
				t.Fatal(err)
			}
			if task.GetState() != tc.task || taskstate.FindStep(task, "reserve").GetState() != tc.reserve {
				t.Fatalf("task %v, reserve %v; want %v, %v", task.GetState(), taskstate.FindStep(task, "reserve").GetState(), tc.task, tc.reserve)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	cases := []struct {
		code, msg, want string
	}{
		{"card_declined", "insufficient funds", "card_declined: insufficient funds"},
		{"card_declined", "card_declined: insufficient funds", "card_declined: insufficient funds"},
		{"", "insufficient funds", "insufficient funds"},
		{"card_declined", "", "card_declined"},
		{"card_declined", "card_declined", "card_declined"},
		{"", "", ""},
	}
	for _, tc := range cases {
		if got := taskstate.ErrorText(&reevev1.StepError{Code: tc.code, Message: tc.msg}); got != tc.want {
			t.Errorf("ErrorText(%q, %q) = %q, want %q", tc.code, tc.msg, got, tc.want)
		}
	}
}

// The reason a task ends with (and its alert carries) names the root cause:
// the last error, and whether it was permanent or the attempts ran out.
func TestEscalationReasonCarriesTheCause(t *testing.T) {
	wf := &reevev1.Workflow{Name: "trip", DefaultRetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 2, NonRetryableErrorCodes: []string{"card_declined"}},
		DefaultScheduleToStartTimeout: durationpb.New(time.Minute),
		Steps:                         []*reevev1.StepSpec{{Name: "charge", Type: "pay.charge", Escalation: reevev1.Escalation_ESCALATION_FAIL}}}
	cases := []struct {
		name string
		fail func(task *reevev1.Task) error
		want string
	}{
		{"permanent, marked by the agent", func(task *reevev1.Task) error {
			return taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{Code: "gateway", Message: "gateway: account closed", NonRetryable: true}, t0)
		}, `step "charge" failed permanently: gateway: account closed`},
		{"permanent, code listed", func(task *reevev1.Task) error {
			return taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{Code: "card_declined", Message: "insufficient funds"}, t0)
		}, `step "charge" failed permanently: card_declined: insufficient funds`},
		{"attempts exhausted", func(task *reevev1.Task) error {
			for i := range 2 {
				at := t0.Add(time.Duration(i) * time.Hour)
				if err := taskstate.Fail(task, run(t, task, "charge", at), "a", &reevev1.StepError{Message: "timeout talking to the bank"}, at); err != nil {
					return err
				}
			}
			return nil
		}, `step "charge" exhausted its 2 attempts: last error timeout talking to the bank`},
		{"no agent claimed it", func(task *reevev1.Task) error {
			s := taskstate.FindStep(task, "charge")
			s.FailureCount = 1
			return taskstate.FailExpired(task, "charge", s.GetAttempt(), "", "supervisor/s1", t0.Add(time.Hour))
		}, `step "charge" exhausted its 2 attempts: last error schedule_to_start_timeout: no agent of type "pay.charge" claimed it`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t", wf, nil, t0)
			if err := tc.fail(task); err != nil {
				t.Fatal(err)
			}
			if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(task.GetReason(), tc.want) {
				t.Fatalf("task %v, reason %q; want FAILED, a reason starting %q", task.GetState(), task.GetReason(), tc.want)
			}
		})
	}
}

// An expired compensation out of attempts fails the task with a reason that
// names the compensation and its last error.
func TestEscalationReasonOfAnExpiredCompensation(t *testing.T) {
	wf := &reevev1.Workflow{Name: "trip", DefaultRetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 2}, Steps: []*reevev1.StepSpec{
		{Name: "reserve", Type: "inv.reserve", Compensation: &reevev1.CompensationSpec{Type: "inv.release"}},
		{Name: "charge", Type: "pay.charge", DependsOn: []string{"reserve"}},
	}}
	task := taskstate.New("default", "t", wf, nil, t0)
	if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.Compensate(task, "", "operator", t0); err != nil {
		t.Fatal(err)
	}
	ref := run(t, task, "reserve", t0)
	taskstate.FindStep(task, "reserve").FailureCount = 1
	if err := taskstate.FailExpired(task, "reserve", ref.GetAttempt(), "", "supervisor/s1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	const want = `compensation of step "reserve" exhausted its 2 attempts: last error deadline_exceeded: no result before complete-by`
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(task.GetReason(), want) {
		t.Fatalf("task %v, reason %q; want FAILED, a reason starting %q", task.GetState(), task.GetReason(), want)
	}
}

// An expiry names the agent that held the attempt, and says when its
// stream ended.
func TestExpiryNamesTheAgentAndItsDisconnect(t *testing.T) {
	wf := &reevev1.Workflow{Name: "trip", DefaultRetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 1}, Steps: []*reevev1.StepSpec{
		{Name: "charge", Type: "pay.charge", HeartbeatTimeout: durationpb.New(time.Second)}}}
	task := taskstate.New("default", "t", wf, nil, t0)
	ref := run(t, task, "charge", t0)
	if err := taskstate.ShortenOnDisconnect(task, "charge", ref.GetAttempt(), "a", t0.Add(time.Second), "scheduler/s1", t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.FailExpired(task, "charge", ref.GetAttempt(), "", "supervisor/s1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The deadline in force was the disconnect's (t0+1s), not the
	// complete-by the attempt was dispatched with (t0 + the default
	// timeout): the message gives both, each for what it is (issue 37).
	disconnectBy := t0.Add(time.Second).UTC().Format(time.RFC3339Nano)
	completeBy := t0.Add(workflow.EffectiveTimeout(wf, wf.GetSteps()[0])).UTC().Format(time.RFC3339Nano)
	for _, want := range []string{
		`step "charge" exhausted its 1 attempt: last error deadline_exceeded: no result from agent a, whose stream ended: it did not reconnect with the attempt before ` + disconnectBy,
		"; the attempt's complete-by was " + completeBy,
	} {
		if !strings.Contains(task.GetReason(), want) {
			t.Errorf("reason %q, want it to contain %q", task.GetReason(), want)
		}
	}
}

// An agent that cannot read its input (bad_input) fails the task with an
// alert instead of compensating the saga, so that once the agent is fixed
// an operator retries the step and the saga goes on; a step that sets its
// escalation explicitly gets it (issue 37).
func TestBadInputFailsForAnOperatorInsteadOfCompensating(t *testing.T) {
	badInput := &reevev1.StepError{Code: taskstate.CodeBadInput, Message: "json: cannot unmarshal string into int", NonRetryable: true}
	for _, explicit := range []bool{false, true} {
		wf := orders()
		if explicit {
			wf.GetSteps()[1].Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
		} else {
			wf.GetSteps()[1].Escalation = reevev1.Escalation_ESCALATION_UNSPECIFIED // the saga's default: compensate
		}
		task := taskstate.New("default", "t", wf, nil, t0)
		if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
		if err := taskstate.Fail(task, run(t, task, "charge", t0), "a", badInput, t0); err != nil {
			t.Fatal(err)
		}
		if explicit {
			if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
				t.Fatalf("explicit compensate: task %v, want COMPENSATING", task.GetState())
			}
			continue
		}
		if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || !strings.Contains(task.GetReason(), "fix the agent or the input, then retry the step") {
			t.Fatalf("task %v, reason %q; want FAILED saying how to go on", task.GetState(), task.GetReason())
		}
		if err := taskstate.RetryFailed(task, "charge", 0, "agent fixed", "operator", t0); err != nil {
			t.Fatalf("retry after the fix: %v", err)
		}
		if err := taskstate.Complete(task, run(t, task, "charge", t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
		if st := taskstate.FindStep(task, "charge"); st.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
			t.Fatalf("charge %v after the retry, want SUCCEEDED", st.GetState())
		}
	}
}

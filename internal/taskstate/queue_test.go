package taskstate_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

const sts = 30 * time.Second

// queuedOrders is orders() with a 30s schedule-to-start timeout on every step
// (a workflow default) and 2 attempts.
func queuedOrders() *reevev1.Workflow {
	wf := orders()
	wf.DefaultScheduleToStartTimeout = durationpb.New(sts)
	return wf
}

// Every way a step enters, leaves or re-enters the ready queue, and the
// deadline it then has: the invariant is that a queued step of a step with a
// schedule-to-start timeout always has a deadline, and nothing else has one
// but a dispatched execution.
func TestScheduleToStartDeadline(t *testing.T) {
	cases := []struct {
		name string
		wf   func() *reevev1.Workflow
		// do runs from a new task and returns the step to look at.
		do   func(t *testing.T, task *reevev1.Task) *reevev1.Step
		want time.Time // zero: no schedule-to-start deadline
	}{
		{"root queued at submission", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			return taskstate.FindStep(task, "reserve")
		}, t0.Add(sts)},
		{"no timeout, no deadline", orders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			return taskstate.FindStep(task, "reserve")
		}, time.Time{}},
		{"step's own timeout wins over the default", func() *reevev1.Workflow {
			wf := queuedOrders()
			wf.Steps[0].ScheduleToStartTimeout = durationpb.New(time.Minute)
			return wf
		}, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			return taskstate.FindStep(task, "reserve")
		}, t0.Add(time.Minute)},
		{"waiting for dependencies has none", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			return taskstate.FindStep(task, "charge")
		}, time.Time{}},
		{"claimed: none (complete-by instead)", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			run(t, task, "reserve", t0.Add(time.Second))
			return taskstate.FindStep(task, "reserve")
		}, time.Time{}},
		{"dependent queued when its dependency succeeds", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			at := t0.Add(time.Minute)
			must(t, taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, at))
			return taskstate.FindStep(task, "charge")
		}, t0.Add(time.Minute + sts)},
		{"retry counts from the end of its backoff", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			must(t, taskstate.Fail(task, run(t, task, "reserve", t0), "a", &reevev1.StepError{Message: "flaky"}, t0))
			return taskstate.FindStep(task, "reserve")
		}, t0.Add(time.Second + sts)},
		{"compensation uses its own timeout", func() *reevev1.Workflow {
			wf := queuedOrders()
			wf.Steps[0].Compensation.ScheduleToStartTimeout = durationpb.New(time.Hour)
			wf.Steps[1].Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
			return wf
		}, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			must(t, taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0))
			must(t, taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{NonRetryable: true}, t0))
			return taskstate.FindStep(task, "reserve")
		}, t0.Add(time.Hour)},
		{"canceled: none", queuedOrders, func(t *testing.T, task *reevev1.Task) *reevev1.Step {
			must(t, taskstate.Cancel(task, "", "client", false, t0))
			return taskstate.FindStep(task, "reserve")
		}, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t", tc.wf(), nil, t0)
			s := tc.do(t, task)
			got := s.GetScheduleToStartDeadline()
			if tc.want.IsZero() != (got == nil) || (got != nil && !got.AsTime().Equal(tc.want)) {
				t.Fatalf("schedule-to-start deadline %v, want %v (step %v)", got, tc.want, s)
			}
			for _, st := range task.GetSteps() {
				at, ok := taskstate.Deadline(st)
				want := taskstate.Dispatched(st) || (taskstate.Queued(st) && st.GetScheduleToStartDeadline() != nil)
				if ok != want || (taskstate.Queued(st) && ok && !at.Equal(st.GetScheduleToStartDeadline().AsTime())) {
					t.Fatalf("step %s: Deadline = %v, %v; step %v", st.GetName(), at, ok, st)
				}
			}
		})
	}
}

// The supervisor's decision for a queued step past its schedule-to-start
// deadline follows the step's policy, as for an expired attempt.
func TestDecideQueuedExpiry(t *testing.T) {
	cases := []struct {
		name       string
		escalation reevev1.Escalation
		failures   int32
		nonRetry   []string
		want       taskstate.Action
		delay      time.Duration
	}{
		{"first expiry retries after the backoff", 0, 0, nil, taskstate.ActionRetry, time.Second},
		{"attempts exhausted compensates by default in a saga", 0, 2, nil, taskstate.ActionCompensate, 0},
		{"attempts exhausted fails", reevev1.Escalation_ESCALATION_FAIL, 2, nil, taskstate.ActionFail, 0},
		{"attempts exhausted compensates", reevev1.Escalation_ESCALATION_COMPENSATE, 2, nil, taskstate.ActionCompensate, 0},
		{"attempts exhausted waits then retries", reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, 2, nil, taskstate.ActionRetry, 10 * time.Minute},
		{"code listed as non-retryable escalates at once", reevev1.Escalation_ESCALATION_FAIL, 0, []string{taskstate.CodeScheduleToStart}, taskstate.ActionFail, 0},
		{"deadline_exceeded listed does not affect a queued expiry", 0, 0, []string{taskstate.CodeDeadlineExceeded}, taskstate.ActionRetry, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wf := queuedOrders()
			wf.Steps[0].Escalation = tc.escalation
			wf.Steps[0].EscalationWait = durationpb.New(10 * time.Minute)
			wf.Steps[0].RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(time.Second), NonRetryableErrorCodes: tc.nonRetry}
			task := taskstate.New("default", "t", wf, nil, t0)
			s := taskstate.FindStep(task, "reserve")
			s.FailureCount = tc.failures
			if action, delay := taskstate.Decide(task, s); action != tc.want || delay != tc.delay {
				t.Fatalf("Decide = %v after %v, want %v after %v", action, delay, tc.want, tc.delay)
			}
		})
	}
}

// The fenced recovery transitions applied to a queued execution past its
// schedule-to-start deadline.
func TestQueuedExpiryTransitions(t *testing.T) {
	late := t0.Add(sts)
	cases := []struct {
		name      string
		do        func(task *reevev1.Task) error
		wantErr   error
		wantTask  reevev1.TaskState
		wantStep  reevev1.StepState
		wantQueue bool // reserve queued again (attempt 2, failure 1, new deadline)
	}{
		{"retry before the deadline is refused", func(task *reevev1.Task) error {
			return taskstate.RetryExpired(task, "reserve", 1, 0, "supervisor/x", late.Add(-time.Millisecond))
		}, taskstate.ErrNotExpired, 0, 0, false},
		{"retry of another attempt is refused", func(task *reevev1.Task) error {
			return taskstate.RetryExpired(task, "reserve", 2, 0, "supervisor/x", late)
		}, taskstate.ErrStale, 0, 0, false},
		{"step without a deadline is refused", func(task *reevev1.Task) error {
			return taskstate.FailExpired(task, "charge", 0, "", "supervisor/x", late)
		}, taskstate.ErrStale, 0, 0, false},
		{"claimed meanwhile: not expired", func(task *reevev1.Task) error {
			must(t, taskstate.Claim(task, "reserve", 1, "s1", "a", late.Add(-time.Second)))
			return taskstate.RetryExpired(task, "reserve", 1, 0, "supervisor/x", late)
		}, taskstate.ErrNotExpired, 0, 0, false},
		{"retry queues the next attempt", func(task *reevev1.Task) error {
			return taskstate.RetryExpired(task, "reserve", 1, 2*time.Second, "supervisor/x", late)
		}, nil, reevev1.TaskState_TASK_STATE_PENDING, reevev1.StepState_STEP_STATE_PENDING, true},
		{"fail fails the step and the task", func(task *reevev1.Task) error {
			return taskstate.FailExpired(task, "reserve", 1, "", "supervisor/x", late)
		}, nil, reevev1.TaskState_TASK_STATE_FAILED, reevev1.StepState_STEP_STATE_FAILED, false},
		{"compensate with nothing to undo ends compensated", func(task *reevev1.Task) error {
			return taskstate.CompensateExpired(task, "reserve", 1, "", "supervisor/x", late)
		}, nil, reevev1.TaskState_TASK_STATE_COMPENSATED, reevev1.StepState_STEP_STATE_FAILED, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t", queuedOrders(), nil, t0)
			before := proto.Clone(task)
			err := tc.do(task)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if proto.Equal(before, task) {
				t.Fatal("nothing changed")
			}
			s := taskstate.FindStep(task, "reserve")
			if task.GetState() != tc.wantTask || s.GetState() != tc.wantStep || s.GetLastError().GetCode() != taskstate.CodeScheduleToStart || s.GetFailureCount() != 1 {
				t.Fatalf("task %v step %v", task.GetState(), s)
			}
			if taskstate.Queued(s) != tc.wantQueue {
				t.Fatalf("queued = %v, want %v: %v", taskstate.Queued(s), tc.wantQueue, s)
			}
			if tc.wantQueue && (s.GetAttempt() != 2 || !s.GetScheduleToStartDeadline().AsTime().Equal(late.Add(2*time.Second+sts))) {
				t.Fatalf("requeued step %v, want attempt 2 with deadline %v", s, late.Add(2*time.Second+sts))
			}
			if _, due := taskstate.Deadline(s); !tc.wantQueue && due {
				t.Fatalf("step %v still has a deadline", s)
			}
		})
	}
}

// A queued compensation that no agent claims fails the task once its
// attempts are exhausted (an operator is alerted), rather than compensating
// forever.
func TestQueuedCompensationExpiryFailsTask(t *testing.T) {
	wf := queuedOrders()
	wf.Steps[1].Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	task := taskstate.New("default", "t", wf, nil, t0)
	must(t, taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0))
	must(t, taskstate.Fail(task, run(t, task, "charge", t0), "a", &reevev1.StepError{NonRetryable: true}, t0))
	reserve := taskstate.FindStep(task, "reserve")
	for range 3 {
		at, ok := taskstate.Deadline(reserve)
		if !ok || !taskstate.Queued(reserve) {
			t.Fatalf("compensation not queued with a deadline: %v", reserve)
		}
		switch action, delay := taskstate.Decide(task, reserve); action {
		case taskstate.ActionRetry:
			must(t, taskstate.RetryExpired(task, "reserve", reserve.GetAttempt(), delay, "supervisor/x", at))
		case taskstate.ActionFail:
			must(t, taskstate.FailExpired(task, "reserve", reserve.GetAttempt(), "", "supervisor/x", at))
		default:
			t.Fatalf("decision %v for a compensation", action)
		}
		if taskstate.TerminalTask(task.GetState()) {
			break
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || reserve.GetState() != reevev1.StepState_STEP_STATE_FAILED || !reserve.GetCompensation() {
		t.Fatalf("task %v reserve %v, want FAILED after the compensation's attempts (2)", task.GetState(), reserve)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

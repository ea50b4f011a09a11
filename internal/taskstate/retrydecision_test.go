package taskstate_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// retryWorkflow is one step, "charge", with a compensation (so that it can
// compensate), a workflow default policy, the step's own policy and the
// compensation's own policy (each nil when not given).
func retryWorkflow(wfPolicy, stepPolicy, compPolicy *reevev1.RetryPolicy, esc reevev1.Escalation) *reevev1.Workflow {
	return &reevev1.Workflow{Name: "pay", DefaultRetryPolicy: wfPolicy, Steps: []*reevev1.StepSpec{{
		Name: "charge", Type: "pay.charge", RetryPolicy: stepPolicy, Escalation: esc, EscalationWait: durationpb.New(10 * time.Minute),
		Compensation: &reevev1.CompensationSpec{Type: "pay.refund", RetryPolicy: compPolicy},
	}}}
}

// at puts the step "charge" of task in the shape of an execution that
// ends: dispatched (or queued), forward (or its compensation), after
// `failures` failures.
func at(task *reevev1.Task, compensating, queued bool, failures int32) *reevev1.Step {
	s := taskstate.FindStep(task, "charge")
	s.State = reevev1.StepState_STEP_STATE_RUNNING
	if compensating {
		s.State = reevev1.StepState_STEP_STATE_COMPENSATING
		s.Compensation = true
	}
	s.ReadyTime = timestamppb.New(t0)
	s.CompleteBy = timestamppb.New(t0.Add(time.Minute))
	if queued {
		s.CompleteBy = nil
		if !compensating {
			s.State = reevev1.StepState_STEP_STATE_PENDING
		}
	}
	s.FailureCount = failures
	return s
}

// NextAttempt over every input it reads: which policy applies (the
// workflow's default, the step's, the compensation's), each policy field
// (max_attempts, initial_backoff, backoff_multiplier, max_backoff,
// non_retryable_error_codes), the failures so far, forward or compensation,
// the cause (an agent's failure, an expiry of a dispatched or queued
// execution, an operator's retry), a permanent error and retry_after, and
// every escalation.
func TestNextAttempt(t *testing.T) {
	const (
		fail     = reevev1.Escalation_ESCALATION_FAIL
		comp     = reevev1.Escalation_ESCALATION_COMPENSATE
		wait     = reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY
		retry    = taskstate.ActionRetry
		undo     = taskstate.ActionCompensate
		failTask = taskstate.ActionFail
		failure  = taskstate.CauseFailure
		expiry   = taskstate.CauseExpiry
		operator = taskstate.CauseOperator
	)
	sec := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	dur := func(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
	p := func(max int32, initial, ceiling time.Duration, mult float64, codes ...string) *reevev1.RetryPolicy {
		pol := &reevev1.RetryPolicy{MaxAttempts: max, BackoffMultiplier: mult, NonRetryableErrorCodes: codes}
		if initial > 0 {
			pol.InitialBackoff = dur(initial)
		}
		if ceiling > 0 {
			pol.MaxBackoff = dur(ceiling)
		}
		return pol
	}
	plain := &reevev1.StepError{Code: "gateway", Message: "bank timed out"}
	declined := &reevev1.StepError{Code: "card_declined"}
	permanent := &reevev1.StepError{Code: "gateway", NonRetryable: true}
	later := &reevev1.StepError{Code: "rate_limited", RetryAfter: dur(42 * time.Second)}
	cases := []struct {
		name                 string
		wfPolicy, stepPolicy *reevev1.RetryPolicy
		compPolicy           *reevev1.RetryPolicy
		esc                  reevev1.Escalation
		compensating, queued bool
		failures             int32
		cause                taskstate.Cause
		err                  *reevev1.StepError

		maxAttempts     int32 // of the policy that applies
		action          taskstate.Action
		delay           time.Duration
		wantFailures    int32
		escalated, perm bool
		newRound        bool
	}{
		// Defaults: 3 attempts, 1s doubling, capped at 60s.
		{name: "defaults: first failure", esc: fail, cause: failure, err: plain, maxAttempts: 3, action: retry, delay: sec(1), wantFailures: 1},
		{name: "defaults: second failure", esc: fail, failures: 1, cause: failure, err: plain, maxAttempts: 3, action: retry, delay: sec(2), wantFailures: 2},
		{name: "defaults: third failure exhausts", esc: fail, failures: 2, cause: failure, err: plain, maxAttempts: 3, action: failTask, wantFailures: 3, escalated: true},
		{name: "defaults: an expiry counts the same", esc: fail, failures: 1, cause: expiry, maxAttempts: 3, action: retry, delay: sec(2), wantFailures: 2},
		{name: "defaults: an expiry exhausts the same", esc: fail, failures: 2, cause: expiry, maxAttempts: 3, action: failTask, wantFailures: 3, escalated: true},
		{name: "defaults: a queued expiry counts the same", esc: fail, queued: true, failures: 1, cause: expiry, maxAttempts: 3, action: retry, delay: sec(2), wantFailures: 2},
		{name: "defaults: a nil error is retryable", esc: fail, cause: failure, maxAttempts: 3, action: retry, delay: sec(1), wantFailures: 1},

		// Which policy applies.
		{name: "workflow default when the step has none", wfPolicy: p(5, sec(3), 0, 0), esc: fail, failures: 3, cause: failure, err: plain, maxAttempts: 5, action: retry, delay: sec(24), wantFailures: 4},
		{name: "the step's over the workflow's", wfPolicy: p(5, 0, 0, 0), stepPolicy: p(2, 0, 0, 0), esc: fail, failures: 1, cause: failure, err: plain, maxAttempts: 2, action: failTask, wantFailures: 2, escalated: true},
		{name: "a compensation without its own takes the step's", stepPolicy: p(5, sec(3), 0, 0), compensating: true, failures: 1, cause: failure, err: plain, maxAttempts: 5, action: retry, delay: sec(6), wantFailures: 2},
		{name: "a compensation without its own nor the step's takes the workflow's", wfPolicy: p(4, 0, 0, 0), compensating: true, failures: 2, cause: expiry, maxAttempts: 4, action: retry, delay: sec(4), wantFailures: 3},
		{name: "a compensation's own over the step's", stepPolicy: p(5, 0, 0, 0), compPolicy: p(2, sec(7), 0, 0), compensating: true, cause: failure, err: plain, maxAttempts: 2, action: retry, delay: sec(7), wantFailures: 1},
		{name: "the forward step ignores the compensation's", stepPolicy: p(5, 0, 0, 0), compPolicy: p(1, 0, 0, 0), esc: fail, failures: 1, cause: failure, err: plain, maxAttempts: 5, action: retry, delay: sec(2), wantFailures: 2},

		// max_attempts.
		{name: "max_attempts 1: the first failure escalates", stepPolicy: p(1, 0, 0, 0), esc: fail, cause: failure, err: plain, maxAttempts: 1, action: failTask, wantFailures: 1, escalated: true},
		{name: "max_attempts 1: the first expiry escalates", stepPolicy: p(1, 0, 0, 0), esc: fail, cause: expiry, maxAttempts: 1, action: failTask, wantFailures: 1, escalated: true},
		{name: "max_attempts 100: the 99th failure retries", stepPolicy: p(100, 0, 0, 0), esc: fail, failures: 98, cause: failure, err: plain, maxAttempts: 100, action: retry, delay: sec(60), wantFailures: 99},
		{name: "max_attempts 100: the 100th escalates", stepPolicy: p(100, 0, 0, 0), esc: fail, failures: 99, cause: failure, err: plain, maxAttempts: 100, action: failTask, wantFailures: 100, escalated: true},
		{name: "past max_attempts (a lowered policy) escalates", stepPolicy: p(2, 0, 0, 0), esc: fail, failures: 7, cause: expiry, maxAttempts: 2, action: failTask, wantFailures: 8, escalated: true},

		// Backoff: initial × multiplier^(failures−1), capped at max_backoff.
		{name: "initial_backoff", stepPolicy: p(9, sec(5), 0, 0), esc: fail, cause: failure, err: plain, maxAttempts: 9, action: retry, delay: sec(5), wantFailures: 1},
		{name: "backoff_multiplier", stepPolicy: p(9, sec(1), 0, 3), esc: fail, failures: 3, cause: failure, err: plain, maxAttempts: 9, action: retry, delay: sec(27), wantFailures: 4},
		{name: "backoff_multiplier 1: constant", stepPolicy: p(9, sec(4), 0, 1), esc: fail, failures: 6, cause: expiry, maxAttempts: 9, action: retry, delay: sec(4), wantFailures: 7},
		{name: "fractional multiplier", stepPolicy: p(9, sec(10), 0, 1.5), esc: fail, failures: 1, cause: failure, err: plain, maxAttempts: 9, action: retry, delay: sec(15), wantFailures: 2},
		{name: "max_backoff caps", stepPolicy: p(9, sec(1), sec(5), 2), esc: fail, failures: 4, cause: failure, err: plain, maxAttempts: 9, action: retry, delay: sec(5), wantFailures: 5},
		{name: "default max_backoff 60s caps", stepPolicy: p(20, sec(1), 0, 0), esc: fail, failures: 10, cause: expiry, maxAttempts: 20, action: retry, delay: sec(60), wantFailures: 11},
		{name: "default max_backoff is at least initial_backoff", stepPolicy: p(9, sec(90), 0, 0), esc: fail, failures: 3, cause: failure, err: plain, maxAttempts: 9, action: retry, delay: sec(90), wantFailures: 4},
		{name: "retry_after replaces the backoff", esc: fail, failures: 1, cause: failure, err: later, maxAttempts: 3, action: retry, delay: sec(42), wantFailures: 2},
		{name: "retry_after is ignored when not retried", esc: fail, failures: 2, cause: failure, err: later, maxAttempts: 3, action: failTask, wantFailures: 3, escalated: true},

		// Non-retryable errors escalate at once, whatever attempts are left.
		{name: "a code listed is permanent", stepPolicy: p(5, 0, 0, 0, "card_declined"), esc: fail, cause: failure, err: declined, maxAttempts: 5, action: failTask, wantFailures: 1, escalated: true, perm: true},
		{name: "a code not listed is retried", stepPolicy: p(5, 0, 0, 0, "card_declined"), esc: fail, cause: failure, err: plain, maxAttempts: 5, action: retry, delay: sec(1), wantFailures: 1},
		{name: "marked non_retryable by the agent", esc: fail, cause: failure, err: permanent, maxAttempts: 3, action: failTask, wantFailures: 1, escalated: true, perm: true},
		{name: "deadline_exceeded listed: an expiry is permanent", stepPolicy: p(5, 0, 0, 0, taskstate.CodeDeadlineExceeded), esc: fail, cause: expiry, maxAttempts: 5, action: failTask, wantFailures: 1, escalated: true, perm: true},
		{name: "deadline_exceeded listed: a queued expiry is not", stepPolicy: p(5, 0, 0, 0, taskstate.CodeDeadlineExceeded), esc: fail, queued: true, cause: expiry, maxAttempts: 5, action: retry, delay: sec(1), wantFailures: 1},
		{name: "schedule_to_start_timeout listed: a queued expiry is permanent", stepPolicy: p(5, 0, 0, 0, taskstate.CodeScheduleToStart), esc: fail, queued: true, cause: expiry, maxAttempts: 5, action: failTask, wantFailures: 1, escalated: true, perm: true},
		{name: "an expiry ignores the agent's error", esc: fail, cause: expiry, err: permanent, maxAttempts: 3, action: retry, delay: sec(1), wantFailures: 1},
		{name: "the compensation's codes for a compensation", stepPolicy: p(5, 0, 0, 0, "card_declined"), compPolicy: p(5, 0, 0, 0), compensating: true, cause: failure, err: declined, maxAttempts: 5, action: retry, delay: sec(1), wantFailures: 1},

		// Escalations.
		{name: "unset escalation compensates in a saga", failures: 2, cause: failure, err: plain, maxAttempts: 3, action: undo, wantFailures: 3, escalated: true},
		{name: "compensate", esc: comp, failures: 2, cause: expiry, maxAttempts: 3, action: undo, wantFailures: 3, escalated: true},
		{name: "compensate on a permanent error", esc: comp, cause: failure, err: permanent, maxAttempts: 3, action: undo, wantFailures: 1, escalated: true, perm: true},
		{name: "wait_then_retry: a new round after escalation_wait", esc: wait, failures: 2, cause: failure, err: plain, maxAttempts: 3, action: retry, delay: 10 * time.Minute, escalated: true, newRound: true},
		{name: "wait_then_retry after an expiry", esc: wait, failures: 2, cause: expiry, maxAttempts: 3, action: retry, delay: 10 * time.Minute, escalated: true, newRound: true},
		{name: "wait_then_retry on a permanent error", esc: wait, cause: failure, err: permanent, maxAttempts: 3, action: retry, delay: 10 * time.Minute, escalated: true, perm: true, newRound: true},
		{name: "wait_then_retry on a permanent expiry", stepPolicy: p(5, 0, 0, 0, taskstate.CodeDeadlineExceeded), esc: wait, cause: expiry, maxAttempts: 5, action: retry, delay: 10 * time.Minute, escalated: true, perm: true, newRound: true},
		{name: "an exhausted compensation fails the task", esc: comp, compensating: true, failures: 2, cause: failure, err: plain, maxAttempts: 3, action: failTask, wantFailures: 3, escalated: true},
		{name: "a compensation does not wait_then_retry", esc: wait, compensating: true, failures: 2, cause: expiry, maxAttempts: 3, action: failTask, wantFailures: 3, escalated: true},
		{name: "a permanent compensation error fails the task", esc: comp, compensating: true, cause: failure, err: permanent, maxAttempts: 3, action: failTask, wantFailures: 1, escalated: true, perm: true},

		// An operator's retry: a new round, at once, whatever the count.
		{name: "operator: a new round at once", esc: fail, failures: 3, cause: operator, maxAttempts: 3, action: retry, newRound: true},
		{name: "operator: a compensation's policy", compPolicy: p(7, 0, 0, 0), esc: fail, compensating: true, failures: 3, cause: operator, maxAttempts: 7, action: retry, newRound: true},
		{name: "operator: ignores any error", esc: fail, cause: operator, err: permanent, maxAttempts: 3, action: retry, newRound: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t", retryWorkflow(tc.wfPolicy, tc.stepPolicy, tc.compPolicy, tc.esc), nil, t0)
			s := at(task, tc.compensating, tc.queued, tc.failures)
			got := taskstate.NextAttempt(task, s, tc.cause, tc.err)
			want := fmt.Sprintf("max_attempts %d: %v after %v, failures %d, escalated %v, permanent %v, new round %v",
				tc.maxAttempts, tc.action, tc.delay, tc.wantFailures, tc.escalated, tc.perm, tc.newRound)
			if g := fmt.Sprintf("max_attempts %d: %v after %v, failures %d, escalated %v, permanent %v, new round %v",
				got.Policy.GetMaxAttempts(), got.Action, got.Delay, got.Failures, got.Escalated, got.Permanent, got.NewRound); g != want {
				t.Errorf("NextAttempt:\n got %s\nwant %s", g, want)
			}
			if s.GetFailureCount() != tc.failures {
				t.Errorf("NextAttempt changed the step's failure count to %d", s.GetFailureCount())
			}
		})
	}
}

// An attempt that expires and one whose agent reports the same error code
// end the same way: the same next attempt, backoff, failure count and
// escalation. (Before NextAttempt, a wait_then_retry of an expiry whose code
// is non-retryable kept the failure count, so the new round had fewer
// attempts than after an agent's permanent failure.)
func TestExpiryAndFailureAgree(t *testing.T) {
	cases := []struct {
		name     string
		policy   *reevev1.RetryPolicy
		esc      reevev1.Escalation
		failures int32
	}{
		{"first failure retries", &reevev1.RetryPolicy{MaxAttempts: 3}, reevev1.Escalation_ESCALATION_FAIL, 0},
		{"second failure backs off longer", &reevev1.RetryPolicy{MaxAttempts: 3}, reevev1.Escalation_ESCALATION_FAIL, 1},
		{"exhausted: fail", &reevev1.RetryPolicy{MaxAttempts: 3}, reevev1.Escalation_ESCALATION_FAIL, 2},
		{"exhausted: compensate", &reevev1.RetryPolicy{MaxAttempts: 3}, reevev1.Escalation_ESCALATION_COMPENSATE, 2},
		{"exhausted: wait_then_retry", &reevev1.RetryPolicy{MaxAttempts: 3}, reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, 2},
		{"permanent: fail", &reevev1.RetryPolicy{MaxAttempts: 3, NonRetryableErrorCodes: []string{taskstate.CodeDeadlineExceeded}}, reevev1.Escalation_ESCALATION_FAIL, 0},
		{"permanent: wait_then_retry starts a new round", &reevev1.RetryPolicy{MaxAttempts: 3, NonRetryableErrorCodes: []string{taskstate.CodeDeadlineExceeded}}, reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, 1},
	}
	end := t0.Add(time.Hour)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outcome := func(expire bool) string {
				task := taskstate.New("default", "t", retryWorkflow(nil, tc.policy, nil, tc.esc), nil, t0)
				ref := run(t, task, "charge", t0)
				s := taskstate.FindStep(task, "charge")
				s.FailureCount = tc.failures
				var err error
				if expire {
					switch act, delay := taskstate.Decide(task, s); act {
					case taskstate.ActionRetry:
						err = taskstate.RetryExpired(task, "charge", ref.GetAttempt(), delay, "supervisor/x", end)
					case taskstate.ActionCompensate:
						err = taskstate.CompensateExpired(task, "charge", ref.GetAttempt(), "", "supervisor/x", end)
					default:
						err = taskstate.FailExpired(task, "charge", ref.GetAttempt(), "", "supervisor/x", end)
					}
				} else {
					err = taskstate.Fail(task, ref, "a", &reevev1.StepError{Code: taskstate.CodeDeadlineExceeded}, end)
				}
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("task %v, step %v attempt %d failures %d not before %v", taskstate.StateName(task.GetState()),
					taskstate.StateName(s.GetState()), s.GetAttempt(), s.GetFailureCount(), s.GetNotBefore().AsTime().Sub(end))
			}
			if failed, expired := outcome(false), outcome(true); failed != expired {
				t.Errorf("after an agent's failure: %s\nafter an expiry:         %s", failed, expired)
			}
		})
	}
}

// A retry of an expired attempt that its policy would not retry (its code
// is non-retryable) starts a new round of attempts, whoever asks for it:
// the supervisor by wait_then_retry, or an operator by a fenced retry_step
// when the escalation is to fail. (Before NextAttempt only an exhausted
// step's count was reset.)
func TestRetryExpiredBeyondThePolicyStartsANewRound(t *testing.T) {
	for _, esc := range []reevev1.Escalation{reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, reevev1.Escalation_ESCALATION_FAIL} {
		t.Run(esc.String(), func(t *testing.T) {
			policy := &reevev1.RetryPolicy{MaxAttempts: 3, NonRetryableErrorCodes: []string{taskstate.CodeDeadlineExceeded}}
			task := taskstate.New("default", "t", retryWorkflow(nil, policy, nil, esc), nil, t0)
			ref := run(t, task, "charge", t0)
			if err := taskstate.RetryExpired(task, "charge", ref.GetAttempt(), time.Minute, "supervisor/x", t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if s := taskstate.FindStep(task, "charge"); s.GetFailureCount() != 0 || !taskstate.Queued(s) || s.GetAttempt() != 2 {
				t.Fatalf("after the retry: failures %d, queued %v, attempt %d; want 0, true, 2", s.GetFailureCount(), taskstate.Queued(s), s.GetAttempt())
			}
		})
	}
}

package taskstate

import (
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// In this package "retry" means one thing: another attempt of a step, as
// its retry policy (or an operator) allows. NextAttempt is the one place
// that decides it, for every way an attempt can end without a success:
//
//   - an agent's failure (Fail; also an attempt taken back unacknowledged
//     more than MaxUnacknowledged times): CauseFailure;
//   - an expiry the supervisor, or a scheduler for a dropped agent's
//     heartbeat execution, acts on (Decide, then RetryExpired,
//     CompensateExpired or FailExpired): CauseExpiry;
//   - an operator's retry_step of a FAILED step (RetryFailed): CauseOperator.

// Cause is why a step needs a decision about its next attempt.
type Cause int

const (
	// CauseFailure: the step's agent reported a failure (StepError), or an
	// attempt no agent acknowledged counts as one (past MaxUnacknowledged).
	CauseFailure Cause = iota + 1
	// CauseExpiry: the step's current execution passed its deadline
	// (complete-by while dispatched, schedule-to-start deadline while
	// queued). Its error code is ExpiryCode.
	CauseExpiry
	// CauseOperator: an operator retries the FAILED step (retry_step).
	CauseOperator
)

// RetryDecision is what happens to a step after its current attempt ended
// without a success, or when an operator retries it.
type RetryDecision struct {
	// Policy is the retry policy that applies, fully defaulted: the
	// compensation's (workflow.CompensationRetryPolicy) while the step is
	// COMPENSATING, else the step's (workflow.EffectiveRetryPolicy).
	Policy *reevev1.RetryPolicy
	// Failures is the step's failure count once the decision is applied:
	// the count before this failure plus one, or 0 when the next attempt
	// starts a new round (NewRound).
	Failures int32
	// Permanent reports that the error is not retryable under Policy: the
	// agent marked it non_retryable, or its code is listed in
	// non_retryable_error_codes.
	Permanent bool
	// Escalated reports that Policy allows no other attempt (the error is
	// Permanent, or this failure reached max_attempts), so Action is the
	// step's escalation: ActionFail for a compensation; else
	// workflow.EffectiveEscalation as ActionRetry (wait_then_retry),
	// ActionCompensate or ActionFail.
	Escalated bool
	// Action is what comes next: ActionRetry queues the next attempt, not
	// dispatched before Delay has passed; ActionCompensate undoes the task;
	// ActionFail fails it (an operator is alerted).
	Action Action
	// Delay is the wait before the next attempt: workflow.Backoff(Policy,
	// Failures), or the agent's StepError.retry_after when it set one; the
	// step's escalation_wait for wait_then_retry; 0 for an operator's retry
	// and when Action is not ActionRetry.
	Delay time.Duration
	// NewRound reports that the next attempt starts a new round of
	// Policy's attempts and backoffs (wait_then_retry, an operator's
	// retry): Failures is 0.
	NewRound bool
}

// NextAttempt decides what follows the end of the current attempt of step s
// of task t (or an operator's retry of it), before that end is recorded on
// s. It counts attempts one way for every cause: this failure is the step's
// FailureCount+1st (a count that a take-back of an unacknowledged attempt
// does not grow, and that a new round resets), and another attempt is
// allowed while that count is below max_attempts and the error is not
// permanent.
//
// stepErr is the agent's error for CauseFailure; an expiry's error is
// {code: ExpiryCode(s)} and an operator's retry has none, so stepErr is
// ignored for them. For CauseOperator, s must already be in the state of
// its next execution (PENDING, or COMPENSATING for a compensation), so that
// Policy is the one that applies to it.
//
// NextAttempt changes nothing: the caller applies the decision.
func NextAttempt(t *reevev1.Task, s *reevev1.Step, cause Cause, stepErr *reevev1.StepError) RetryDecision {
	d := RetryDecision{Policy: retryPolicy(t, s)}
	switch cause {
	case CauseOperator:
		d.Action, d.NewRound = ActionRetry, true
		return d
	case CauseExpiry:
		stepErr = &reevev1.StepError{Code: ExpiryCode(s)}
	}
	d.Failures = s.GetFailureCount() + 1
	d.Permanent = !workflow.Retryable(d.Policy, stepErr)
	if !d.Permanent && d.Failures < d.Policy.GetMaxAttempts() {
		d.Action = ActionRetry
		d.Delay = workflow.Backoff(d.Policy, int(d.Failures))
		if ra := stepErr.GetRetryAfter(); ra != nil {
			d.Delay = ra.AsDuration() // the agent knows better (e.g. a rate limit's reset)
		}
		return d
	}
	d.Escalated = true
	if Compensating(s) {
		d.Action = ActionFail
		return d
	}
	spec := Spec(t, s.GetName())
	if cause == CauseFailure && stepErr.GetCode() == CodeBadInput && spec.GetEscalation() == reevev1.Escalation_ESCALATION_UNSPECIFIED {
		// The agent could not read its input: a bug to fix, after which
		// the step can run again. Undoing the whole saga for it (the
		// default escalation of a workflow with compensations) would throw
		// away work an operator can resume, so the task fails with an
		// alert instead: fix the agent or the input, then retry the step
		// (retry_step), or compensate the task (compensate_task). A step
		// that sets its escalation explicitly gets it.
		d.Action = ActionFail
		return d
	}
	switch workflow.EffectiveEscalation(t.GetWorkflow(), spec) {
	case reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY:
		// A new round: after the wait the step gets its policy's attempts
		// and backoff again (the count drives both), instead of one attempt
		// per wait with an ever longer backoff.
		d.Action, d.Delay, d.Failures, d.NewRound = ActionRetry, workflow.EscalationWait(spec), 0, true
	case reevev1.Escalation_ESCALATION_COMPENSATE:
		d.Action = ActionCompensate
	default:
		d.Action = ActionFail
	}
	return d
}

// retryPolicy is the retry policy of the step's current execution: its
// compensation's while it is COMPENSATING, else its own (else the
// workflow's default), fully defaulted.
func retryPolicy(t *reevev1.Task, s *reevev1.Step) *reevev1.RetryPolicy {
	spec := Spec(t, s.GetName())
	if Compensating(s) {
		return workflow.CompensationRetryPolicy(t.GetWorkflow(), spec)
	}
	return workflow.EffectiveRetryPolicy(t.GetWorkflow(), spec)
}

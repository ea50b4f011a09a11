package agentsdk

import (
	"errors"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// CompletionToken returns the completion token of this execution: whoever
// holds it may complete the step from outside (the scheduler's
// CompleteStep, `reeve task complete --token`), e.g. a payment provider's
// webhook that arrives hours later. Pass it on, then hand the step off
// with Defer. It is a secret: do not log it. It is "" for a compensation
// and from a scheduler that does not support deferral.
func (s *Step) CompletionToken() string { return s.assignment.GetCompletionToken() }

// Defer hands the step off; a handler returns it as its error:
//
//	token := step.CompletionToken()
//	if err := bank.StartTransfer(ctx, req, "https://hooks.example.com/reeve/"+token); err != nil {
//		return nil, err
//	}
//	return nil, step.Defer("waiting for the bank's confirmation")
//
// The scheduler keeps the step RUNNING, without heartbeats and no longer
// this agent's (its slot is free at once, and a disconnect or restart of
// the agent does not recover it), until someone completes it with its
// token or its complete-by passes (the step's policy then applies). reason
// (at most 1 KiB) goes to the task's history.
//
// A compensation cannot be deferred, nor an execution from a scheduler
// that sent no token (one that does not support deferral): Defer then
// returns a retryable *Error with the code "defer_unsupported", and the
// step fails as with any error.
func (s *Step) Defer(reason string) error {
	if s.CompletionToken() == "" {
		return &Error{Code: "defer_unsupported", Message: "this execution cannot be deferred: it is a compensation, or the scheduler sent no completion token (it does not support deferral)"}
	}
	return &deferral{reason: truncate(reason, 1024)}
}

// ErrDeferred matches the error Defer returns (errors.Is).
var ErrDeferred = errors.New("agentsdk: step deferred")

// deferral is Defer's error: not a failure, a hand-off.
type deferral struct{ reason string }

func (d *deferral) Error() string        { return "step deferred: " + d.reason }
func (d *deferral) Is(target error) bool { return target == ErrDeferred }

// deferredResult is the StepResult of a handler that returned Defer's
// error (wrapped or not); nil for any other outcome.
func deferredResult(ref *reevev1.StepRef, herr error) *reevev1.StepResult {
	var d *deferral
	if !errors.As(herr, &d) {
		return nil
	}
	return &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{Reason: d.reason}}}
}

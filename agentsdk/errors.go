package agentsdk

import (
	"errors"
	"time"
)

// Error is a step failure with a machine-readable code. A handler may return
// it (or wrap it) to set StepError.code, which workflows can list in
// the workflow's RetryPolicy.non_retryable_error_codes.
type Error struct {
	// Code is matched against non_retryable_error_codes; at most 63 characters.
	Code string
	// Message is shown to operators; at most 4 KiB.
	Message string
	// NonRetryable marks the failure permanent, like Permanent.
	NonRetryable bool
	// Details is structured detail for programs and operators (encoded as
	// JSON, at most 4 KiB: StepError.details, kept with the step's last
	// error); nil by default. Details that cannot be encoded or are larger
	// are not sent.
	Details any
	// RetryAfter, when positive, replaces the retry policy's backoff before
	// the next attempt (e.g. until a rate limit resets; at most 24h, longer
	// is cut to 24h). Default 0: the policy's backoff. Ignored when the
	// failure is not retried.
	RetryAfter time.Duration
}

// Error returns "code: message" (the message alone without a code). The
// agent sends the code and the message in fields of their own, so operators
// see the code once.
func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as non-transient: the scheduler does not retry the
// step but escalates it at once (fail, compensate, or wait then retry, as
// the workflow says). Retry and Breaker never retry it either.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent or is an *Error with NonRetryable set.
func IsPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && e.NonRetryable
}

package workflow

import (
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// WaitExternal is the one value of StepSpec.wait_for: the step is completed
// from outside (CompleteStep, by its completion token or by name), not by an
// agent.
const WaitExternal = "external"

// MaxWaitTimeout bounds the timeout of a step that waits for a completion
// from outside (an approval may take days); an agent's step stays bounded
// by MaxTimeout.
const MaxWaitTimeout = 30 * 24 * time.Hour

// WaitsExternal reports whether the step is completed from outside
// (wait_for "external") instead of by an agent.
func WaitsExternal(s *reevev1.StepSpec) bool {
	return s.GetWaitFor() == WaitExternal
}

// validateWaitFor checks a step that sets wait_for. It must be "external";
// type must then be empty (no agent runs the step). timeout is required
// (how long the step waits for its completion; MinTimeout to
// MaxWaitTimeout), and what only concerns an agent's execution is refused:
// heartbeat_timeout, reassign_after_disconnect and
// schedule_to_start_timeout. A compensation, run by an agent of its type
// when the task is undone after the step succeeded, a retry policy (an
// expiry is a failure: the step waits again, with a new attempt and a new
// token) and an escalation apply as to any step. ok reports whether the
// step waits (wait_for set), so that the caller skips the checks of an
// agent's step.
func validateWaitFor(field string, s *reevev1.StepSpec) (ok bool, err error) {
	if s.GetWaitFor() == "" {
		return false, nil
	}
	if !WaitsExternal(s) {
		return true, fieldErr(field+".wait_for", "%q is not a kind of wait: the one kind is %q%s", truncate(s.GetWaitFor()), WaitExternal, DidYouMean(s.GetWaitFor(), []string{WaitExternal}))
	}
	switch {
	case s.GetType() != "":
		return true, fieldErr(field+".type", "must be empty when wait_for is set: the step is completed from outside, not by an agent of type %q", truncate(s.GetType()))
	case s.GetSleep() != nil:
		return true, fieldErr(field+".sleep", "a step either waits for a completion (wait_for) or sleeps, not both")
	case s.GetTimeout() == nil:
		return true, fieldErr(field+".timeout", "required with wait_for: how long the step waits for its completion (at most %v)", MaxWaitTimeout)
	case s.GetHeartbeatTimeout() != nil:
		return true, fieldErr(field+".heartbeat_timeout", "does not apply to a step that waits for a completion (no agent runs it)")
	case s.GetReassignAfterDisconnect() != nil:
		return true, fieldErr(field+".reassign_after_disconnect", "does not apply to a step that waits for a completion (no agent runs it)")
	case s.GetScheduleToStartTimeout() != nil:
		return true, fieldErr(field+".schedule_to_start_timeout", "does not apply to a step that waits for a completion (it is never queued for an agent)")
	}
	return true, validateDuration(field+".timeout", s.GetTimeout(), MinTimeout, MaxWaitTimeout)
}

// maxStepTimeout is the largest timeout step s may set.
func maxStepTimeout(s *reevev1.StepSpec) time.Duration {
	if WaitsExternal(s) {
		return MaxWaitTimeout
	}
	return MaxTimeout
}

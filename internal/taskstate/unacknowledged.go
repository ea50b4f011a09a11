package taskstate

import (
	"fmt"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// MaxUnacknowledged is how many attempts of a step may be taken back from
// agents that never acknowledged them without counting as failures; past it
// an unacknowledged attempt is a failure like any other (code
// CodeNotAcknowledged), so a step that no agent ever takes cannot cycle for
// ever.
const MaxUnacknowledged = 10

// CodeNotAcknowledged is the error code of an attempt its agent never
// acknowledged, once it counts as a failure (see MaxUnacknowledged).
const CodeNotAcknowledged = "not_acknowledged"

// Unacknowledged takes back the dispatched execution (name, attempt) that
// agentID never acknowledged, or that could not be delivered to it: it never
// started, so the next attempt is queued at once and the failure count is
// unchanged (Step.unacknowledged_attempts counts it instead, up to
// MaxUnacknowledged). It returns ErrStale when that execution is not the
// step's current one held by agentID (for instance because the claim that
// would have dispatched it never committed), and changes nothing then.
func Unacknowledged(t *reevev1.Task, name string, attempt int32, agentID, reason, actor string, now time.Time) error {
	if TerminalTask(t.GetState()) {
		return ErrTerminal
	}
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agentID {
		return fmt.Errorf("%w: step %q is %s at attempt %d held by %q, not attempt %d held by %q",
			ErrStale, name, s.GetState(), s.GetAttempt(), s.GetLockedByAgent(), attempt, agentID)
	}
	if s.GetUnacknowledgedAttempts() >= MaxUnacknowledged {
		failAttempt(t, s, &reevev1.StepError{Code: CodeNotAcknowledged, Message: reason}, actor, now)
		return nil
	}
	s.UnacknowledgedAttempts++
	release(s)
	addHistory(t, now, "step.unacknowledged", name, attempt, actor, reason)
	requeue(t, s, now, 0)
	addHistory(t, now, "step.ready", name, s.GetAttempt(), actor, "")
	return nil
}

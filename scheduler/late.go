package scheduler

import (
	"fmt"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// LateResultGrace is how long after an attempt's complete-by its result is
// still accepted. Past it the result is refused (FAILED_PRECONDITION) even
// if the supervisor has not recovered the attempt yet: the scheduler judges
// expiry by its own clock in the transaction that would record the result,
// so how fast the supervisor drains a mass expiry does not decide whether a
// late result wins. The grace covers clock skew between the agent's host and
// the scheduler's and the supervisor's recovery target for a mass expiry
// (docs/architecture.md, Timing).
const LateResultGrace = time.Second

// checkNotLate refuses a result for the current attempt of a step that is
// past its complete-by by more than LateResultGrace at now. Anything else
// (another attempt, another agent, a step not dispatched) is left to the
// transition, which refuses it with its own reason.
func checkNotLate(t *reevev1.Task, ref *reevev1.StepRef, agentID string, now time.Time) error {
	st := taskstate.FindStep(t, ref.GetStep())
	if st == nil || !taskstate.Dispatched(st) || st.GetAttempt() != ref.GetAttempt() || st.GetLockedByAgent() != agentID || st.GetCompleteBy() == nil {
		return nil
	}
	if late := now.Sub(st.GetCompleteBy().AsTime()); late > LateResultGrace {
		return fmt.Errorf("result for attempt %d of step %q arrived %v after its complete-by %s (accepted up to %v after): the attempt has expired and will be retried: %w",
			ref.GetAttempt(), ref.GetStep(), late.Round(time.Millisecond), st.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano), LateResultGrace, taskstate.ErrStale)
	}
	return nil
}

package taskstate

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Heartbeats survive the stream: when the stream of an agent running an
// execution with a heartbeat timeout ends, the execution's complete-by is
// moved to the agent's last heartbeat plus that timeout (ShortenOnDisconnect),
// so that the deadline index, which the supervisor watches, expires it then
// even if no scheduler remembers the stream. If the agent reconnects in time
// and lists the execution in Register.running, its original complete-by is
// put back (RestoreOnReconnect).

// ShortenOnDisconnect moves the complete-by of the named execution, which
// agent runs, to at (not earlier than now) if that is earlier. It returns
// ErrStale if the execution is no longer that agent's.
func ShortenOnDisconnect(t *reevev1.Task, name string, attempt int32, agent string, at time.Time, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agent {
		return ErrStale
	}
	at = later(at, now)
	if !at.Before(s.GetCompleteBy().AsTime()) {
		return nil
	}
	s.CompleteBy = timestamppb.New(at)
	addHistory(t, now, "step.agent_disconnected", name, attempt, actor,
		fmt.Sprintf("agent %s's stream ended; complete-by moved to its last heartbeat plus the heartbeat timeout or the end plus reassign_after_disconnect (%s)", agent, at.UTC().Format(time.RFC3339Nano)))
	return nil
}

// RestoreOnReconnect puts back the complete-by the execution was dispatched
// with (its dispatch time, from the history, plus its timeout) if
// ShortenOnDisconnect moved it and it has not passed yet. It changes nothing
// (and returns ErrStale) when the execution is no longer agent's or already
// expired, and nothing when it cannot tell the original complete-by (the
// dispatch event was dropped from a long history).
func RestoreOnReconnect(t *reevev1.Task, name string, attempt int32, agent, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agent ||
		!now.Before(s.GetCompleteBy().AsTime()) {
		return ErrStale
	}
	var dispatched time.Time
	for _, h := range t.GetHistory() {
		if h.GetStep() == name && h.GetAttempt() == attempt && (h.GetKind() == "step.dispatched" || h.GetKind() == "compensation.dispatched") {
			dispatched = h.GetTime().AsTime()
		}
	}
	if dispatched.IsZero() {
		return nil
	}
	spec := Spec(t, name)
	timeout := workflow.EffectiveTimeout(t.GetWorkflow(), spec)
	if Compensating(s) {
		timeout = workflow.CompensationTimeout(t.GetWorkflow(), spec)
	}
	orig := dispatched.Add(timeout)
	if !s.GetCompleteBy().AsTime().Before(orig) {
		return nil
	}
	s.CompleteBy = timestamppb.New(orig)
	addHistory(t, now, "step.agent_reconnected", name, attempt, actor,
		fmt.Sprintf("agent %s reconnected still running it; complete-by back to %s", agent, orig.UTC().Format(time.RFC3339Nano)))
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

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
// put back (RestoreOnReconnect). That is the path of an agent lost together
// with its scheduler (the supervisor's AGENT_LOST decision); a scheduler that
// lives recovers the executions of a stream that ended itself, at their
// heartbeat deadline, in one write each (ExpireDisconnected).

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

// RestoreOnReconnect adopts an execution a reconnecting agent lists in
// Register.running, when it declares a heartbeat timeout: it always records
// step.agent_reconnected (which makes a pending ExpireDisconnected of the
// scheduler that saw the old stream end refuse), and puts back the
// complete-by the execution was dispatched with (its dispatch time, from the
// history, plus its timeout) if ShortenOnDisconnect moved it. It changes
// nothing (and returns ErrStale) when the execution is no longer agent's or
// already expired. When it cannot tell the original complete-by (the
// dispatch event was dropped from a long history) it keeps the one in force.
func RestoreOnReconnect(t *reevev1.Task, name string, attempt int32, agent, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agent ||
		!now.Before(s.GetCompleteBy().AsTime()) {
		return ErrStale
	}
	if orig, ok := dispatchedCompleteBy(t, s); ok && s.GetCompleteBy().AsTime().Before(orig) {
		s.CompleteBy = timestamppb.New(orig)
	}
	addHistory(t, now, "step.agent_reconnected", name, attempt, actor,
		fmt.Sprintf("agent %s reconnected still running it; complete-by %s", agent, s.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano)))
	return nil
}

// ExpireForgotten moves the complete-by of an execution to now because its
// agent connected again without it in Register.running, which lists every
// execution the agent still runs or holds a result for: the agent no longer
// runs it, and the supervisor recovers it as any expired execution. It
// refuses with ErrStale when the execution is no longer agent's (task
// terminal, step not dispatched, another attempt or agent); it changes
// nothing when the complete-by already passed.
func ExpireForgotten(t *reevev1.Task, name string, attempt int32, agent, actor string, now time.Time) error {
	s := FindStep(t, name)
	if s == nil {
		return ErrUnknownStep
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agent {
		return ErrStale
	}
	if !now.Before(s.GetCompleteBy().AsTime()) {
		return nil
	}
	s.CompleteBy = timestamppb.New(now)
	addHistory(t, now, "step.agent_forgot", name, attempt, actor,
		fmt.Sprintf("agent %s connected again without this attempt in Register.running: it no longer runs it; complete-by moved to now", agent))
	return nil
}

// dispatchedCompleteBy is the complete-by the current execution of s was
// dispatched with: its dispatch time, from the history, plus its timeout;
// false when the dispatch event was dropped from a long history.
func dispatchedCompleteBy(t *reevev1.Task, s *reevev1.Step) (time.Time, bool) {
	var dispatched time.Time
	for _, h := range t.GetHistory() {
		if h.GetStep() == s.GetName() && h.GetAttempt() == s.GetAttempt() && (h.GetKind() == "step.dispatched" || h.GetKind() == "compensation.dispatched") {
			dispatched = h.GetTime().AsTime()
		}
	}
	if dispatched.IsZero() {
		return time.Time{}, false
	}
	spec := Spec(t, s.GetName())
	timeout := workflow.EffectiveTimeout(t.GetWorkflow(), spec)
	if Compensating(s) {
		timeout = workflow.CompensationTimeout(t.GetWorkflow(), spec)
	}
	return dispatched.Add(timeout), true
}

// ExpireDisconnected prepares the recovery of an execution by the scheduler
// that watched its heartbeats when its agent's stream ended: lastBeat is the
// last heartbeat that scheduler received, deadline that beat plus the
// heartbeat timeout. It refuses with ErrStale when the execution is no
// longer agent's (task terminal, step not dispatched, another attempt or
// agent) or was adopted again after lastBeat (a step.agent_reconnected event
// of the attempt later than lastBeat: the agent reconnected, to this
// scheduler or another, and is watched there), and with ErrNotExpired before
// deadline. Otherwise it moves the complete-by to deadline (if earlier),
// records step.agent_disconnected, and returns the supervisor's decision for
// the expired execution (Decide): the caller applies it in the same write
// with RetryExpired, CompensateExpired or FailExpired.
//
// The reconnect check compares times of two schedulers' clocks (the event is
// written by the adopting one): a skew larger than the time between the last
// beat and the reconnect can make the old scheduler miss a re-adoption.
func ExpireDisconnected(t *reevev1.Task, name string, attempt int32, agent string, lastBeat, deadline time.Time,
	actor string, now time.Time) (Action, time.Duration, error) {
	s := FindStep(t, name)
	if s == nil {
		return 0, 0, &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", t.GetId(), name)}
	}
	if TerminalTask(t.GetState()) || !Dispatched(s) || s.GetAttempt() != attempt || s.GetLockedByAgent() != agent {
		return 0, 0, &refusal{ErrStale, fmt.Sprintf("attempt %d of step %q is no longer agent %s's: the step is %s at attempt %d, held by %q",
			attempt, name, agent, StateName(s.GetState()), s.GetAttempt(), s.GetLockedByAgent())}
	}
	if at, ok := AdoptedSince(t, name, attempt, lastBeat); ok {
		return 0, 0, &refusal{ErrStale, fmt.Sprintf("agent %s adopted attempt %d of step %q again at %s, after its last heartbeat here",
			agent, attempt, name, at.UTC().Format(time.RFC3339Nano))}
	}
	if now.Before(deadline) {
		return 0, 0, &refusal{ErrNotExpired, fmt.Sprintf("attempt %d of step %q has not expired: its heartbeat deadline is %s",
			attempt, name, deadline.UTC().Format(time.RFC3339Nano))}
	}
	if deadline.Before(s.GetCompleteBy().AsTime()) {
		s.CompleteBy = timestamppb.New(deadline)
	}
	addHistory(t, now, "step.agent_disconnected", name, attempt, actor,
		fmt.Sprintf("agent %s's stream ended and its deadline after the disconnect passed (last heartbeat or adoption %s, deadline %s)", agent,
			lastBeat.UTC().Format(time.RFC3339Nano), deadline.UTC().Format(time.RFC3339Nano)))
	action, delay := Decide(t, s)
	return action, delay, nil
}

// AdoptedSince reports whether a reconnecting agent adopted the attempt
// (step.agent_reconnected) after since, and when.
func AdoptedSince(t *reevev1.Task, name string, attempt int32, since time.Time) (time.Time, bool) {
	for _, h := range t.GetHistory() {
		if h.GetKind() == "step.agent_reconnected" && h.GetStep() == name && h.GetAttempt() == attempt && h.GetTime().AsTime().After(since) {
			return h.GetTime().AsTime(), true
		}
	}
	return time.Time{}, false
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

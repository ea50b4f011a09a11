package scheduler

import (
	"errors"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// submitClaim is a claim made in a new task's record before it is created
// (WithDispatchOnSubmit): the create commits the task with the step
// already running on the slot's agent, in one transaction guarded like any
// creation.
type submitClaim struct {
	slot *directSlot
	a    *reevev1.StepAssignment
	st   *reevev1.Step
}

// claimOnSubmit claims, in rec (not yet written), the first queued step
// that is due, for an agent of this scheduler with room for it, when no
// ready step of its type waits in this scheduler's queue (those go first).
// It returns nil, and leaves rec as it was, when there is no such agent.
// The agent's capacity stays reserved until settleSubmitClaim.
func (s *Server) claimOnSubmit(rec *storev1.TaskRecord) *submitClaim {
	if !s.opts.dispatchOnSubmit {
		return nil
	}
	t := rec.GetTask()
	now := s.opts.clock.Now()
	var st *reevev1.Step
	for _, cand := range t.GetSteps() {
		if taskstate.Queued(cand) {
			st = cand
			break
		}
	}
	if st == nil || (st.GetNotBefore() != nil && now.Before(st.GetNotBefore().AsTime())) {
		return nil
	}
	slot := s.disp.reserveDirect(queueKey{t.GetNamespace(), taskstate.ExecutionType(t, st)})
	if slot == nil {
		return nil
	}
	if err := taskstate.Claim(t, st.GetName(), st.GetAttempt(), s.opts.id, slot.conn.agentID, now); err != nil {
		s.disp.unreserve(slot) // rec is unchanged: Claim checks before it writes
		return nil
	}
	return &submitClaim{slot: slot, a: assignment(t, st), st: st}
}

// settleSubmitClaim ends a claim made on submit once the create returned:
// the assignment goes to the agent if the task was created; the
// reservation is released if it was not (the id was taken: the existing
// task is the answer); and if the outcome is unknown (the create may have
// committed after the call gave up) the attempt is taken back, as for a
// claim whose outcome is unknown.
func (s *Server) settleSubmitClaim(c *submitClaim, rec *storev1.TaskRecord, created bool, err error) {
	agentID := c.slot.conn.agentID
	if err != nil && !notWritten(err) {
		ref := c.a.GetRef()
		s.log.Warn("submit with claim: outcome unknown, taking the attempt back", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "err", err)
		s.goWork(func() { s.takeBack(ref, agentID, "claim on submit, outcome unknown: "+err.Error()) })
	}
	if err != nil || !created {
		s.disp.unreserve(c.slot)
		return
	}
	// claimed puts the attempt's trace context in the assignment: before
	// it goes to the stream, whose send loop encodes it.
	s.tel.claimed(rec, c.st, c.a, s.opts.id, agentID, s.opts.clock.Now())
	s.disp.deliver(c.slot, c.a)
}

// notWritten reports whether a create failed in a way that certainly wrote
// nothing: refused before it reached etcd (overloaded, too many operations,
// too large), by etcd as a whole (out of space) or by its workflow compare
// (a newer version exists). Only other failures
// (unavailable, timed out) leave the outcome unknown.
func notWritten(err error) bool {
	return errors.Is(err, store.ErrOverloaded) || errors.Is(err, store.ErrTooManyOps) ||
		errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrNoSpace) || errors.Is(err, store.ErrStaleWorkflow)
}

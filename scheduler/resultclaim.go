package scheduler

import (
	"context"
	"errors"
	"time"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Claim in the result's write. A result that makes the task's next step
// ready would otherwise cost two task writes before an agent has that step:
// the result (the step queued: a ready key written, the watch tells every
// scheduler) and the claim (the ready key deleted). As for a recovered retry
// (direct.go) and a new task's first step (submitclaim.go), when an agent of
// this scheduler has room for the step and nothing of its type waits in this
// scheduler's ready queue, the result's transaction claims it too: one
// write, no ready key, the same record and history as the two writes would
// leave (step.succeeded, then step.dispatched). The claim is made on the
// result's first write only; a write retried because etcd was unavailable
// queues the step as before.

// nextClaim is the outcome of a result's write for the step it claimed.
type nextClaim struct {
	slot *directSlot
	st   *reevev1.Step // the claimed step in the written record; nil when none was claimed
}

// recordResult applies record (a result's transition) to the task, claiming
// the next due step in the same write when it can, and retries without the
// claim while etcd is unavailable, until deadline (updateUntil). A claim
// whose write's outcome is unknown is taken back, as for any claim.
func (s *Server) recordResult(deadline time.Time, ref *reevev1.StepRef, record func(*reevev1.Task, time.Time) error) (before, after *storev1.TaskRecord, next nextClaim, err error) {
	direct := &directClaim{d: s.disp}
	apply := func(t *reevev1.Task) error {
		now := s.opts.clock.Now()
		return direct.claimAfter(t, now, func() error { return record(t, now) })
	}
	ctx, cancel := context.WithDeadline(s.base, deadline)
	before, after, err = s.store.UpdateTask(ctx, ref.GetNamespace(), ref.GetTaskId(), apply)
	cancel()
	slot, claimed, claimedRef := direct.finish()
	switch {
	case err == nil && claimed:
		next = nextClaim{slot: slot, st: taskstate.FindStep(after.GetTask(), claimedRef.GetStep())}
	case err != nil && claimed:
		s.disp.takeBack(claimedRef, slot.conn.agentID, "claim with a result, outcome unknown: "+err.Error())
		fallthrough
	default:
		s.disp.unreserve(slot)
	}
	if err != nil && (errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrConflict)) && s.store.Client().Ctx().Err() == nil {
		before, after, err = s.updateUntil(deadline, ref, func(t *reevev1.Task) error { return record(t, s.opts.clock.Now()) })
	}
	return before, after, next, err
}

// deliverNext hands the step claimed in a result's write to its agent, once
// the result's own consequences (revocations) are done.
func (s *Server) deliverNext(rec *storev1.TaskRecord, next nextClaim) {
	if next.st == nil {
		return
	}
	a := assignment(rec.GetTask(), next.st)
	s.tel.claimed(rec, next.st, a, s.opts.id, next.slot.conn.agentID, s.opts.clock.Now())
	s.disp.deliver(next.slot, a)
}

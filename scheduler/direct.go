package scheduler

import (
	"sync"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Direct dispatch of a recovered step. A RETRY decision whose next attempt
// is due at once would otherwise cost two task writes before an agent has
// it: the recovery (the attempt queued: a ready key written, the watch tells
// every scheduler) and the claim (the ready key deleted). When this
// scheduler has an agent for the step's type with room, and nothing of that
// type is waiting in its ready queue (recovered steps do not overtake queued
// ones), the recovery's transaction claims the new attempt for that agent
// too: one write, no ready key, the same records and history as the two
// writes would leave (step.retry_scheduled, then step.dispatched). The
// transaction keeps the supervisor's fence and the record's compare, so
// everything that holds for a recovery holds for it.

// directSlot is capacity reserved on an agent for one direct dispatch: of a
// recovered step here, or of a new task's first step (submitclaim.go).
type directSlot struct {
	conn *agentConn
}

// reserveDirect reserves room for one assignment of type k on an eligible
// agent, or returns nil (no agent with room, or steps of that type are
// queued here and go first).
func (d *dispatcher) reserveDirect(k queueKey) *directSlot {
	d.lock()
	defer d.unlock()
	if q := d.queues[k]; q != nil && q.Len() > 0 {
		return nil
	}
	conn := d.agents.pick(k, d.s.opts.clock.Now())
	if conn == nil {
		return nil
	}
	conn.reserved++
	return &directSlot{conn: conn}
}

// unreserve gives back a slot that was not used.
func (d *dispatcher) unreserve(sl *directSlot) {
	if sl == nil {
		return
	}
	d.lock()
	sl.conn.reserved--
	d.unlock()
	d.poke()
}

// deliver hands a committed direct dispatch to the slot's agent, as a won
// claim is handed over; the slot's reservation ends.
func (d *dispatcher) deliver(sl *directSlot, a *reevev1.StepAssignment) {
	d.lock()
	defer d.unlock()
	sl.conn.reserved--
	d.handOver(sl.conn, a)
}

// handOver queues a committed assignment on conn's stream and starts
// tracking it (running, unacknowledged, heartbeats), or takes it back when
// the agent cannot get it. d.mu is held.
func (d *dispatcher) handOver(conn *agentConn, a *reevev1.StepAssignment) {
	// An agent that is draining (it asked, or this scheduler is shutting
	// down and sent Drain) would find the assignment behind the Drain
	// message: take it back rather than send it.
	if conn.draining || !conn.sendAssignment(a) {
		ref := a.GetRef()
		d.s.log.Warn("assignment not delivered: agent draining, stream gone or not reading; taking it back", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", conn.agentID)
		d.takeBack(ref, conn.agentID, "assignment could not be delivered to agent "+conn.agentID)
		return
	}
	k := refKey(a.GetRef())
	now := d.s.opts.clock.Now()
	conn.running[k] = a.GetCompleteBy().AsTime()
	conn.unacked[k] = &pendingAck{ref: a.GetRef(), sent: now}
	if a.GetHeartbeatTimeout() != nil || a.GetReassignAfterDisconnect() != nil {
		conn.beats[k] = newBeat(a.GetRef(), a.GetHeartbeatTimeout(), a.GetReassignAfterDisconnect(), now)
	}
}

// directClaim claims, inside a transition, a step the transition made
// queued and due for an agent here with room: a RETRY decision's next
// attempt (apply: taskstate.RetryExpired, then taskstate.Claim) or the step
// a result made ready (claimAfter, resultclaim.go). slot keeps the reservation across
// re-runs of the transition (a lost race runs it again on the fresh record);
// claimed reports whether this run claimed.
//
// The store may run the transition again after UpdateTask returned (its
// caller's context ended while the write was queued or committing): once
// finish is called, a run neither reserves nor claims. Guarded by mu.
type directClaim struct {
	d        *dispatcher
	mu       sync.Mutex
	finished bool
	slot     *directSlot
	claimed  bool
	ref      *reevev1.StepRef // the claimed attempt
}

func (r *directClaim) apply(t *reevev1.Task, step string, attempt int32, delay time.Duration, actor string, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claimed = false
	if err := taskstate.RetryExpired(t, step, attempt, delay, actor, now); err != nil {
		return err
	}
	if r.finished {
		return nil
	}
	r.claimLocked(t, taskstate.FindStep(t, step), now)
	return nil
}

// claimAfter runs a transition of t and, when it succeeds, claims the
// task's first queued step if it is due and an agent here has room for it:
// the next step a result made ready (resultclaim.go).
func (r *directClaim) claimAfter(t *reevev1.Task, now time.Time, transition func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claimed = false
	if err := transition(); err != nil {
		return err
	}
	if r.finished {
		return nil
	}
	for _, st := range t.GetSteps() {
		if taskstate.Queued(st) {
			r.claimLocked(t, st, now)
			break
		}
	}
	return nil
}

// claimLocked claims st, queued in t, for the reserved slot's agent (it
// reserves one on first use) when st is due and the agent takes its type.
// r.mu is held.
func (r *directClaim) claimLocked(t *reevev1.Task, st *reevev1.Step, now time.Time) {
	if !taskstate.Queued(st) || (st.GetNotBefore() != nil && now.Before(st.GetNotBefore().AsTime())) {
		return
	}
	k := queueKey{t.GetNamespace(), taskstate.ExecutionType(t, st)}
	if r.slot == nil {
		r.slot = r.d.reserveDirect(k)
	}
	if r.slot == nil || !r.slot.serves(k) {
		return
	}
	// Claim refuses before it changes anything: on a refusal the record is
	// the transition alone, and the step waits in the ready queue.
	if err := taskstate.Claim(t, st.GetName(), st.GetAttempt(), r.d.s.opts.id, r.slot.conn.agentID, now); err != nil {
		return
	}
	r.claimed, r.ref = true, taskstate.Ref(t, st)
}

// finish ends the transition's use of the slot and returns it, with
// whether the last run claimed and the claimed attempt.
func (r *directClaim) finish() (slot *directSlot, claimed bool, ref *reevev1.StepRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = true
	return r.slot, r.claimed, r.ref
}

// serves reports whether the slot's agent takes steps of k.
func (sl *directSlot) serves(k queueKey) bool {
	if sl.conn.ns != k.ns {
		return false
	}
	for _, t := range sl.conn.types {
		if t == k.typ {
			return true
		}
	}
	return false
}

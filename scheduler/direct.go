package scheduler

import (
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The dispatcher's side of a claim inside another write (writeclaim.go):
// room reserved on an agent before the write, and the assignment handed
// over once it committed.

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

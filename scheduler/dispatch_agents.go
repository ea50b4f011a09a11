package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The dispatcher's agent side: the streams it dispatches to, their
// capacity, acknowledgements and heartbeats, and the hand-over of committed
// assignments (claims here, claims inside another write: claim.go).

// addAgent makes a registered stream eligible for work.
func (d *dispatcher) addAgent(c *agentConn) {
	d.lock()
	d.seq++
	c.seq = d.seq
	d.agents.add(c)
	d.adoptConn(c) // attempts of an earlier stream, claimed before a limit
	d.unlock()
	d.poke()
}

// removeAgent forgets a stream that ended and stops its send loop. It
// returns the heartbeat-tracked attempts no other stream of the agent
// watches (see heartbeats.go), and the attempts the stream ran that no
// other stream of the agent holds (left: refKey -> complete-by), with
// whether a stream of the agent registered after this one (newer): that
// stream's Register did not list them (forgotten.go). Under the lock, so
// that no assignment is queued on it afterwards (claims queue theirs under
// the lock too, after checking done).
func (d *dispatcher) removeAgent(c *agentConn) (beats []*beat, left map[string]time.Time, newer bool) {
	d.lock()
	defer d.unlock()
	d.agents.remove(c)
	close(c.done)
	left = make(map[string]time.Time, len(c.running))
	for k, by := range c.running {
		left[k] = by
	}
	for _, other := range d.agents.byAgent[c.agentID] {
		if other.ns != c.ns {
			continue
		}
		for k := range other.running {
			delete(left, k)
		}
		if other.seq > c.seq {
			newer = true
		}
	}
	return d.orphanedBeats(c), left, newer
}

// holds reports whether a stream of the agent here runs the attempt k
// (refKey).
func (d *dispatcher) holds(agentID, k string) bool {
	d.lock()
	defer d.unlock()
	for _, c := range d.agents.byAgent[agentID] {
		if _, ok := c.running[k]; ok {
			return true
		}
	}
	return false
}

// takeBackUnsent takes back the assignments that never left the ended
// stream c: still queued, or the one whose Send failed. The agent never got
// them; without this they would stay RUNNING, locked to it, until their
// complete-by.
func (d *dispatcher) takeBackUnsent(c *agentConn, failed *reevev1.ConnectResponse) {
	pending := []*reevev1.ConnectResponse{failed}
	for more := true; more; {
		select {
		case q := <-c.out:
			c.outBytes.Add(-q.size)
			pending = append(pending, q.m)
		default:
			more = false
		}
	}
	d.lock()
	defer d.unlock()
	for _, m := range pending {
		a := m.GetAssignment()
		if a == nil {
			continue
		}
		d.takeBack(a.GetRef(), c.agentID, "assignment not delivered: the agent's stream ended")
	}
}

// heartbeat records liveness in memory only: beats cost no etcd write.
func (d *dispatcher) heartbeat(c *agentConn, hb *reevev1.Heartbeat) {
	d.lock()
	defer d.unlock()
	now := d.clock.Now()
	for _, r := range hb.GetRefs() {
		if b := c.beats[refKey(r)]; b != nil {
			b.last = now
		}
	}
	for _, hd := range hb.GetDetails() {
		b := c.beats[refKey(hd.GetRef())]
		if b == nil || hd.GetDetails() == nil || workflow.ValidateValue("heartbeat.details", hd.GetDetails(), workflow.MaxHeartbeatDetailsBytes) != nil {
			continue // not watched here, or too large: dropped
		}
		b.details = hd.GetDetails()
	}
}

// heartbeatDetails returns the last heartbeat details conn's agent sent
// for ref, if any.
func (d *dispatcher) heartbeatDetails(c *agentConn, ref *reevev1.StepRef) *structpb.Value {
	d.lock()
	defer d.unlock()
	return c.beats[refKey(ref)].getDetails()
}

// acked records an AssignmentAck.
func (d *dispatcher) acked(c *agentConn, ref *reevev1.StepRef) {
	d.lock()
	defer d.unlock()
	delete(c.unacked, refKey(ref))
	if c.stuck {
		c.stuck = false
		d.log.Info("agent acknowledges assignments again", "agent_id", c.agentID, "session_id", c.sessionID)
		d.poke()
	}
}

// setDraining makes a stream whose agent asked to drain ineligible for work.
func (d *dispatcher) setDraining(c *agentConn) {
	d.lock()
	c.draining = true
	d.unlock()
}

// connected returns the agent streams connected here.
func (d *dispatcher) connected() []*agentConn {
	d.lock()
	defer d.unlock()
	return d.agents.all()
}

// drainAgents tells every agent to move elsewhere and waits, up to timeout,
// for their streams to end.
func (d *dispatcher) drainAgents(timeout time.Duration) {
	d.lock()
	conns := d.agents.all()
	for _, c := range conns {
		c.draining = true
		c.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Drain{Drain: &reevev1.Drain{Reason: "scheduler shutting down"}}})
	}
	d.unlock()
	deadline := time.After(timeout)
	for _, c := range conns {
		select {
		case <-c.done:
		case <-deadline:
			return
		}
	}
}

// revoke tells the agents holding revoked executions, when connected here,
// to stop, and frees their capacity. Holders connected to other schedulers
// stop at their complete-by, and their late results are refused.
func (d *dispatcher) revoke(holders []taskstate.Holder, reason string) {
	if len(holders) == 0 {
		return
	}
	d.lock()
	defer d.unlock()
	for _, h := range holders {
		d.agents.release(h.AgentID, h.Ref)
		for _, c := range d.agents.byAgent[h.AgentID] {
			if c.ns != h.Ref.GetNamespace() {
				continue // another namespace's agent that happens to use the same id
			}
			c.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Cancel{Cancel: &reevev1.CancelStep{Ref: h.Ref, Reason: reason}}})
		}
	}
	d.poke()
}

// orphanedBeats removes c's heartbeat-tracked attempts that no other stream
// of the same agent tracks, and returns them. d.mu is held; c has been
// removed from the agent set.
func (d *dispatcher) orphanedBeats(c *agentConn) []*beat {
	var out []*beat
	for k, b := range c.beats {
		watched := false
		for _, other := range d.agents.byAgent[c.agentID] {
			if _, ok := other.beats[k]; ok {
				watched = true
			}
		}
		if !watched {
			out = append(out, b)
		}
	}
	return out
}

// watches reports whether a stream of the agent on this scheduler watches
// the attempt's heartbeats.
func (d *dispatcher) watches(agentID string, ref *reevev1.StepRef) bool {
	d.lock()
	defer d.unlock()
	for _, c := range d.agents.byAgent[agentID] {
		if _, ok := c.beats[refKey(ref)]; ok {
			return true
		}
	}
	return false
}

// runningUntil returns the complete-by of an attempt conn runs that this
// scheduler dispatched or adopted; ok is false for any other.
func (d *dispatcher) runningUntil(conn *agentConn, ref *reevev1.StepRef) (by time.Time, ok bool) {
	d.lock()
	defer d.unlock()
	by, ok = conn.running[refKey(ref)]
	return by, ok
}

// releaseRef frees the capacity an attempt held on agentID's streams.
func (d *dispatcher) releaseRef(agentID string, ref *reevev1.StepRef) {
	d.lock()
	freed := d.agents.release(agentID, ref)
	d.unlock()
	if freed {
		d.poke()
	}
}

// queueStat is one queue's length and how long its oldest item waited.
type queueStat struct {
	n      int
	oldest time.Duration
}

// queueStats returns, for every queue with due steps or connected agents,
// how many steps wait and the wait of the oldest. A queue also keeps its
// items in the order queued, so the oldest is found at once: O(queues).
func (d *dispatcher) queueStats() map[queueKey]queueStat {
	d.lock()
	defer d.unlock()
	now := d.clock.Now()
	out := map[queueKey]queueStat{}
	for _, c := range d.agents.all() {
		for _, typ := range c.types {
			out[queueKey{c.ns, typ}] = queueStat{}
		}
	}
	for k, q := range d.queues {
		st := queueStat{n: q.Len()}
		if f := q.oldest(); f != nil {
			st.oldest = max(now.Sub(f.queuedAt), 0)
		}
		out[k] = st
	}
	return out
}

// load counts in-flight attempts and connected agents by (namespace, type).
func (d *dispatcher) load() (running int, byType map[queueKey]int) {
	d.lock()
	defer d.unlock()
	byType = map[queueKey]int{}
	for _, c := range d.agents.all() {
		running += len(c.running)
		for _, typ := range c.types {
			byType[queueKey{c.ns, typ}]++
		}
	}
	return running, byType
}

// loads snapshots the in-flight steps of this scheduler's agent
// streams, by session id.
func (d *dispatcher) loads() map[string]agentLoad {
	d.lock()
	defer d.unlock()
	out := map[string]agentLoad{}
	for _, c := range d.agents.all() {
		out[c.sessionID] = agentLoad{ns: c.ns, id: c.agentID, inFlight: int32(c.reserved + len(c.running))}
	}
	return out
}

// queueHeads snapshots the ready queues of namespace ns: depth and the
// step that waited longest (with priorities and fairness keys, not always
// the one dispatched next).
func (d *dispatcher) queueHeads(ns string) []queueHead {
	d.lock()
	defer d.unlock()
	var out []queueHead
	for k, q := range d.queues {
		if k.ns != ns || q.Len() == 0 {
			continue
		}
		h := queueHead{typ: k.typ, depth: q.Len()}
		if it := q.oldest(); it != nil {
			h.taskID, h.step = it.entry.GetTaskId(), it.entry.GetStep()
		}
		out = append(out, h)
	}
	return out
}

// reserveDirect reserves room for one assignment of type k, for a step of
// the given priority, on an eligible agent, or returns nil (no agent with
// room, steps of that type and of that priority or a higher one are queued
// here and go first, or the scheduler is stopping). The slot holds the
// scheduler's shutdown until it is delivered or given back, so that a
// claim it makes is delivered or taken back before Run returns.
func (d *dispatcher) reserveDirect(k queueKey, priority int32) *directSlot {
	release, ok := d.work.hold()
	if !ok {
		return nil
	}
	d.lock()
	defer d.unlock()
	if q := d.queues[k]; q != nil && q.waitsAtOrAbove(priority) {
		release()
		return nil
	}
	now := d.clock.Now()
	conn := d.agents.pick(k, now)
	if conn == nil {
		release()
		return nil
	}
	// A type with settings: what the claim takes (a max_running slot, a
	// rate token), as the dispatcher's claims take it (limits.go).
	fs, ok := d.flow.take(k, now)
	if !ok {
		release()
		return nil
	}
	conn.reserved++
	return &directSlot{conn: conn, release: release, k: k, fs: fs}
}

// unreserve gives back a slot that was not used.
func (d *dispatcher) unreserve(sl *directSlot) {
	if sl == nil {
		return
	}
	d.lock()
	sl.conn.reserved--
	d.flow.claimed(sl.k, sl.fs, false, d.clock.Now())
	d.unlock()
	sl.release()
	d.poke()
}

// deliver hands a committed direct dispatch to the slot's agent, as a won
// claim is handed over; the slot's reservation ends.
func (d *dispatcher) deliver(sl *directSlot, a *reevev1.StepAssignment) {
	defer sl.release() // after handOver, whose take-back is the slot's obligation
	d.lock()
	defer d.unlock()
	sl.conn.reserved--
	d.flow.claimed(sl.k, sl.fs, true, d.clock.Now())
	d.handOver(sl.conn, a)
	d.adoptUnslotted(a, sl.fs.slot) // a limit that came while it was claimed
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
		d.log.Warn("assignment not delivered: agent draining, stream gone or not reading; taking it back", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", conn.agentID)
		d.takeBack(ref, conn.agentID, "assignment could not be delivered to agent "+conn.agentID)
		return
	}
	k := refKey(a.GetRef())
	now := d.clock.Now()
	conn.running[k] = a.GetCompleteBy().AsTime()
	conn.unacked[k] = &pendingAck{ref: a.GetRef(), sent: now}
	if a.GetHeartbeatTimeout() != nil || a.GetReassignAfterDisconnect() != nil {
		conn.beats[k] = newBeat(a.GetRef(), a.GetHeartbeatTimeout(), a.GetReassignAfterDisconnect(), now)
	}
}

// missedBeats returns, and forgets, the attempts whose agent has not
// heartbeated within their timeout.
func (s *agentSet) missedBeats(now time.Time) []*beat {
	var out []*beat
	for _, conns := range s.byAgent {
		for _, c := range conns {
			for k, b := range c.beats {
				if b.timeout > 0 && now.Sub(b.last) > b.timeout {
					out = append(out, b)
					delete(c.beats, k)
				}
			}
		}
	}
	return out
}

func refKey(r *reevev1.StepRef) string {
	return fmt.Sprintf("%s/%s/%s/%d", r.GetNamespace(), r.GetTaskId(), r.GetStep(), r.GetAttempt())
}

// parseRefKey is the StepRef of a refKey (names and ids never contain "/").
func parseRefKey(k string) (*reevev1.StepRef, bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 4 {
		return nil, false
	}
	attempt, err := strconv.ParseInt(parts[3], 10, 32)
	if err != nil {
		return nil, false
	}
	return &reevev1.StepRef{Namespace: parts[0], TaskId: parts[1], Step: parts[2], Attempt: int32(attempt)}, true
}

// agentSet indexes connected agents by what they serve.
type agentSet struct {
	byQueue map[queueKey][]*agentConn
	byAgent map[string][]*agentConn // agent id -> its streams (normally one)
	next    map[queueKey]int        // round-robin position in byQueue
}

func newAgentSet() agentSet {
	return agentSet{byQueue: map[queueKey][]*agentConn{}, byAgent: map[string][]*agentConn{}, next: map[queueKey]int{}}
}

func (s *agentSet) add(c *agentConn) {
	for _, t := range c.types {
		k := queueKey{c.ns, t}
		s.byQueue[k] = append(s.byQueue[k], c)
	}
	s.byAgent[c.agentID] = append(s.byAgent[c.agentID], c)
}

func (s *agentSet) remove(c *agentConn) {
	for _, t := range c.types {
		k := queueKey{c.ns, t}
		s.byQueue[k] = without(s.byQueue[k], c)
		if len(s.byQueue[k]) == 0 {
			delete(s.byQueue, k)
			delete(s.next, k)
		}
	}
	s.byAgent[c.agentID] = without(s.byAgent[c.agentID], c)
	if len(s.byAgent[c.agentID]) == 0 {
		delete(s.byAgent, c.agentID)
	}
}

// pick returns the agent serving k that may take an assignment now with
// the fewest assignments in flight and unacknowledged (an agent that stopped
// reading collects none of them once it is marked stuck), round-robin among
// equals; or nil.
func (s *agentSet) pick(k queueKey, now time.Time) *agentConn {
	cs := s.byQueue[k]
	start := s.next[k]
	var best *agentConn
	bestIdx := 0
	for i := range cs {
		idx := (start + i) % len(cs)
		c := cs[idx]
		if c.eligible(now) && (best == nil || c.load() < best.load()) {
			best, bestIdx = c, idx
		}
	}
	if best != nil {
		s.next[k] = bestIdx + 1
	}
	return best
}

// overdue is an assignment its agent did not acknowledge in time.
type overdue struct {
	conn *agentConn
	ref  *reevev1.StepRef
}

// overdueAcks returns, and forgets, the assignments unacknowledged for
// longer than timeout; their agents are marked stuck until they
// acknowledge again (probed every probe interval).
func (s *agentSet) overdueAcks(now time.Time, timeout, probe time.Duration) []overdue {
	var out []overdue
	for _, conns := range s.byAgent {
		for _, c := range conns {
			for k, p := range c.unacked {
				if now.Sub(p.sent) <= timeout {
					continue
				}
				out = append(out, overdue{conn: c, ref: p.ref})
				delete(c.unacked, k)
				delete(c.running, k)
				delete(c.beats, k)
				c.stuck = true
				c.probeAt = now.Add(probe)
			}
		}
	}
	return out
}

// releaseExpired drops running attempts past their complete-by and reports
// whether any capacity was freed.
func (s *agentSet) releaseExpired(now time.Time) bool {
	freed := false
	for _, conns := range s.byAgent {
		for _, c := range conns {
			for k, by := range c.running {
				if now.After(by) {
					delete(c.running, k)
					delete(c.unacked, k)
					delete(c.beats, k)
					freed = true
				}
			}
		}
	}
	return freed
}

// release drops a finished attempt from the agent's running set.
func (s *agentSet) release(agentID string, ref *reevev1.StepRef) bool {
	k := refKey(ref)
	freed := false
	for _, c := range s.byAgent[agentID] {
		if _, ok := c.running[k]; ok {
			delete(c.running, k)
			freed = true
		}
		delete(c.unacked, k)
		delete(c.beats, k)
	}
	return freed
}

// all returns every connected stream.
func (s *agentSet) all() []*agentConn {
	var out []*agentConn
	for _, conns := range s.byAgent {
		out = append(out, conns...)
	}
	return out
}

func without(cs []*agentConn, c *agentConn) []*agentConn {
	out := cs[:0:0]
	for _, x := range cs {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

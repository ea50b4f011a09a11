package scheduler

import (
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// agentConn is one registered agent stream. Its counters are guarded by the
// dispatcher's lock.
type agentConn struct {
	sessionID string
	agentID   string
	ns        string
	types     []string
	max       int

	reserved int                    // claims in flight for this agent
	running  map[string]time.Time   // attempts it runs (refKey) -> complete-by
	unacked  map[string]*pendingAck // sent, not yet acknowledged (refKey)
	beats    map[string]*beat       // attempts with a heartbeat timeout or a reassign_after_disconnect (refKey)
	draining bool                   // the agent asked for no more work
	// stuck: an assignment went unacknowledged past the ack timeout. The
	// agent gets no work but one probe assignment at probeAt; an ack
	// clears it.
	stuck   bool
	probeAt time.Time
	// full: an assignment did not fit the send queue. The agent gets no
	// work until the queue has drained to half its bound.
	full bool

	out      chan queued // drained by the stream's send loop
	outBytes atomic.Int64
	maxBytes int64         // bound of outBytes
	done     chan struct{} // closed when the stream ends
}

// queued is a message waiting for the send loop, with its encoded size.
type queued struct {
	m    *reevev1.ConnectResponse
	size int64
}

// pendingAck is an assignment the agent has not acknowledged yet.
type pendingAck struct {
	ref  *reevev1.StepRef
	sent time.Time
}

func newAgentConn(sessionID string, r *reevev1.Register, maxBytes int64) *agentConn {
	return &agentConn{
		sessionID: sessionID,
		agentID:   r.GetAgentId(),
		ns:        r.GetNamespace(),
		types:     r.GetStepTypes(),
		max:       int(r.GetMaxConcurrentSteps()),
		running:   map[string]time.Time{},
		unacked:   map[string]*pendingAck{},
		beats:     map[string]*beat{},
		// At most max assignments are outstanding, at most max result acks
		// (one per running step's result) and at most max cancels (one per
		// running step): with room for all three an assignment is never
		// dropped because the stream's reader is slow (a dropped one is
		// taken back). Bytes are bounded separately by maxBytes.
		out:      make(chan queued, 3*int(r.GetMaxConcurrentSteps())+64),
		maxBytes: maxBytes,
		done:     make(chan struct{}),
	}
}

func (c *agentConn) free() int {
	if c.draining {
		return 0
	}
	return c.max - c.reserved - len(c.running)
}

// eligible reports whether the agent may be given one more assignment now.
func (c *agentConn) eligible(now time.Time) bool {
	if c.full && c.outBytes.Load() < c.maxBytes/2 {
		c.full = false
	}
	if c.free() <= 0 || c.full || c.outBytes.Load() >= c.maxBytes {
		return false
	}
	return !c.stuck || (!now.Before(c.probeAt) && len(c.unacked) == 0 && c.reserved == 0)
}

// load is what dispatch balances: assignments in flight to the agent and
// not yet acknowledged.
func (c *agentConn) load() int { return c.reserved + len(c.unacked) }

// enqueue hands a message to the send loop without blocking the caller. It
// refuses (false) when the stream ended or its queue is full in messages: a
// stream too slow to take it is as good as gone. Only assignments are also
// bounded in bytes (sendAssignment): the other messages are small, and
// dropping a ResultAck or CancelStep for bytes would cost more than it saves.
func (c *agentConn) enqueue(m *reevev1.ConnectResponse) bool {
	return c.enqueueBounded(m, false)
}

func (c *agentConn) enqueueBounded(m *reevev1.ConnectResponse, bytes bool) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	size := int64(proto.Size(m))
	if n := c.outBytes.Add(size); bytes && n > c.maxBytes && n != size {
		c.outBytes.Add(-size)
		return false
	}
	select {
	case c.out <- queued{m: m, size: size}:
		return true
	default:
		c.outBytes.Add(-size)
		return false
	}
}

// sendAssignment queues an assignment, bounded in bytes too (one is always
// admitted into an empty queue); when it does not fit, the agent is marked
// full. Called with the dispatcher's lock held.
func (c *agentConn) sendAssignment(a *reevev1.StepAssignment) bool {
	if c.enqueueBounded(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: a}}, true) {
		return true
	}
	c.full = true
	return false
}

// beat is the in-memory liveness of one attempt whose step sets a
// heartbeat timeout or a reassign_after_disconnect (either may be 0: unset).
type beat struct {
	ref     *reevev1.StepRef
	timeout time.Duration // heartbeat timeout
	grace   time.Duration // reassign_after_disconnect
	last    time.Time     // last heartbeat (or dispatch, or adoption)
}

func newBeat(ref *reevev1.StepRef, heartbeat, reassign *durationpb.Duration, now time.Time) *beat {
	return &beat{ref: ref, timeout: heartbeat.AsDuration(), grace: reassign.AsDuration(), last: now}
}

// lostAt is when the attempt stops being its agent's once the agent's
// stream ended at end: its last heartbeat plus the heartbeat timeout, or
// the end plus the reassign grace, whichever is earlier.
func (b *beat) lostAt(end time.Time) time.Time {
	var at time.Time
	if b.timeout > 0 {
		at = b.last.Add(b.timeout)
	}
	if b.grace > 0 {
		if g := end.Add(b.grace); at.IsZero() || g.Before(at) {
			at = g
		}
	}
	return at
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

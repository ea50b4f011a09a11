package scheduler

import (
	"fmt"
	"time"

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

	reserved int                  // claims in flight for this agent
	running  map[string]time.Time // attempts it runs (refKey) -> complete-by
	beats    map[string]*beat     // attempts with a heartbeat timeout (refKey)
	draining bool                 // the agent asked for no more work

	out  chan *reevev1.ConnectResponse // drained by the stream's send loop
	done chan struct{}                 // closed when the stream ends
}

func newAgentConn(sessionID string, r *reevev1.Register) *agentConn {
	return &agentConn{
		sessionID: sessionID,
		agentID:   r.GetAgentId(),
		ns:        r.GetNamespace(),
		types:     r.GetStepTypes(),
		max:       int(r.GetMaxConcurrentSteps()),
		running:   map[string]time.Time{},
		beats:     map[string]*beat{},
		// At most max assignments are outstanding, at most max result acks
		// (one per running step's result) and at most max cancels (one per
		// running step): with room for all three an assignment is never
		// dropped because the stream's reader is slow (a dropped one waits
		// for the supervisor).
		out:  make(chan *reevev1.ConnectResponse, 3*int(r.GetMaxConcurrentSteps())+64),
		done: make(chan struct{}),
	}
}

func (c *agentConn) free() int {
	if c.draining {
		return 0
	}
	return c.max - c.reserved - len(c.running)
}

// enqueue hands a message to the send loop without blocking the caller; a
// stream too slow to take it is as good as gone, and the attempt's deadline
// covers what it misses.
func (c *agentConn) enqueue(m *reevev1.ConnectResponse) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- m:
		return true
	default:
		return false
	}
}

func (c *agentConn) sendAssignment(a *reevev1.StepAssignment) bool {
	return c.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: a}})
}

// beat is the in-memory liveness of one attempt with a heartbeat timeout.
type beat struct {
	ref     *reevev1.StepRef
	timeout time.Duration
	last    time.Time
}

// missedBeats returns, and forgets, the attempts whose agent has not
// heartbeated within their timeout.
func (s *agentSet) missedBeats(now time.Time) []*beat {
	var out []*beat
	for _, conns := range s.byAgent {
		for _, c := range conns {
			for k, b := range c.beats {
				if now.Sub(b.last) > b.timeout {
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
}

func newAgentSet() agentSet {
	return agentSet{byQueue: map[queueKey][]*agentConn{}, byAgent: map[string][]*agentConn{}}
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
		}
	}
	s.byAgent[c.agentID] = without(s.byAgent[c.agentID], c)
	if len(s.byAgent[c.agentID]) == 0 {
		delete(s.byAgent, c.agentID)
	}
}

// pick returns the agent serving k with the most free capacity, or nil.
func (s *agentSet) pick(k queueKey) *agentConn {
	var best *agentConn
	for _, c := range s.byQueue[k] {
		if c.free() > 0 && (best == nil || c.free() > best.free()) {
			best = c
		}
	}
	return best
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

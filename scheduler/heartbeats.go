package scheduler

import (
	"context"
	"errors"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Heartbeat liveness is kept in memory while an agent's stream is up (beats
// cost no etcd write). When the stream ends, what memory knew is written
// down: each attempt with a heartbeat timeout that no other stream of the
// same agent on this scheduler watches gets a complete-by of its last
// heartbeat plus its timeout (taskstate.ShortenOnDisconnect). The writes go
// through the group commit, so many attempts cost few transactions; the
// deadline index then wakes the supervisor, and nothing depends on this
// scheduler staying up. A reconnecting agent that lists the attempt in
// Register.running gets its original complete-by back (adoptRunning).

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

// persistBeats shortens the complete-by of attempts whose agent's stream
// ended to their last heartbeat plus their heartbeat timeout. It is skipped
// while the scheduler stops: agents then reconnect elsewhere and list what
// they run (the complete-by still covers one that never does).
func (s *Server) persistBeats(agentID string, beats []*beat) {
	if len(beats) == 0 || s.base.Err() != nil {
		return
	}
	end := s.opts.clock.Now()
	for _, b := range beats {
		s.goWork(func() {
			// Generous: after a mass disconnect these writes queue behind
			// each other, and one that gives up leaves its attempt to its
			// complete-by.
			ctx, cancel := context.WithTimeout(s.base, 30*time.Second)
			defer cancel()
			ref := b.ref
			_, _, err := s.store.UpdateTask(ctx, ref.GetNamespace(), ref.GetTaskId(), func(t *reevev1.Task) error {
				if s.disp.watches(agentID, ref) {
					return taskstate.ErrStale // the agent is back on this scheduler
				}
				return taskstate.ShortenOnDisconnect(t, ref.GetStep(), ref.GetAttempt(), agentID, b.lostAt(end),
					"scheduler/"+s.opts.id, s.opts.clock.Now())
			})
			if err != nil && !errors.Is(err, taskstate.ErrStale) && !errors.Is(err, context.Canceled) {
				s.log.Warn("move complete-by to the heartbeat deadline after the agent's stream ended",
					"task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "err", err)
			}
		})
	}
}

// restoreDeadline undoes persistBeats for an attempt a reconnecting agent
// still runs, and returns the complete-by in force.
func (s *Server) restoreDeadline(ctx context.Context, ref *reevev1.StepRef, agentID string, st *reevev1.Step) time.Time {
	_, after, err := s.store.UpdateTask(ctx, ref.GetNamespace(), ref.GetTaskId(), func(t *reevev1.Task) error {
		return taskstate.RestoreOnReconnect(t, ref.GetStep(), ref.GetAttempt(), agentID, "scheduler/"+s.opts.id, s.opts.clock.Now())
	})
	if err != nil {
		return st.GetCompleteBy().AsTime()
	}
	return taskstate.FindStep(after.GetTask(), ref.GetStep()).GetCompleteBy().AsTime()
}

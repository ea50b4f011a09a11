package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Heartbeat liveness is kept in memory while an agent's stream is up (beats
// cost no etcd write). When the stream ends, the executions with a heartbeat
// timeout that no other stream of the same agent on this scheduler watches
// stay in memory here, each with a timer at its last beat plus its timeout;
// at that deadline this scheduler recovers each itself, in one task write
// (taskstate.ExpireDisconnected, then the supervisor's decision for an
// expired execution, a retry dispatched directly when an agent has room),
// unless the agent took the execution back meanwhile: reconnected here (its
// stream watches it again) or to another scheduler (which recorded
// step.agent_reconnected when it adopted it). Many expiries go through the
// group commit together.
//
// Durability: before the agent's record (agents/, under this scheduler's
// lease) is deleted, a disconnected/<ns>/<agent>/<session> key is written
// under the same lease, and deleted once every timer of the stream resolved.
// If this scheduler dies in between, the key vanishes with its lease and the
// supervisor leader acts as for an agent lost with its scheduler
// (store.WatchLostAgents, RECOVERY_ACTION_AGENT_LOST). On a graceful stop
// the timers stop and the keys are left to that same path (the lease is
// revoked); a stream that ends while the scheduler stops writes its
// heartbeat deadlines down instead (persistBeats), and one that ends while
// the scheduler holds no lease (or cannot write the key) writes them down
// too, besides its timers.

// expiriesInFlight bounds the concurrent recoveries of dropped agents'
// executions (as RecoverSteps' 256 decisions × 4 calls do): enough to fill
// the group commit's transactions.
const expiriesInFlight = 1024

// expiryRetry is the wait before a recovery that failed for a transient
// reason (etcd unavailable, a lost race, a timeout) is tried again.
const expiryRetry = 200 * time.Millisecond

// orphaned takes over the heartbeat executions of the ended stream conn
// that no other stream of its agent here watches. Called before the
// agent's record is deleted.
func (a *agents) orphaned(conn *agentConn, beats []*beat) {
	if len(beats) == 0 || a.base.Err() != nil {
		return
	}
	if a.stopping.Err() != nil {
		a.persistBeats(conn.agentID, beats)
		return
	}
	end := a.opts.clock.Now()
	err := errors.New("no instance lease")
	if lease := a.lease(); lease != 0 {
		ctx, cancel := context.WithTimeout(a.base, 2*time.Second)
		err = a.store.PutDisconnected(ctx, &storev1.AgentRecord{
			Namespace: conn.ns, AgentId: conn.agentID, StepTypes: conn.types, MaxConcurrentSteps: int32(conn.max),
			SchedulerId: a.opts.id, SessionId: conn.sessionID, ConnectTime: timestamppb.New(end),
		}, lease)
		cancel()
	}
	if err != nil {
		// Nothing would tell the supervisor should this scheduler die:
		// the deadlines are written down too (a second write each; this
		// scheduler's timers still recover them first when it lives).
		a.log.Warn("record the agent's disconnect; writing its heartbeat deadlines down too",
			"agent_id", conn.agentID, "session_id", conn.sessionID, "err", err)
		a.persistBeats(conn.agentID, beats)
	}
	// Not started once the scheduler stopped: the key then goes with the
	// lease, and the supervisor takes over.
	st := endedStream{ns: conn.ns, agentID: conn.agentID, sessionID: conn.sessionID, end: end} // not conn: its maps stay behind
	a.work.goOptional(func() { a.expireOrphans(st, beats) })
}

// endedStream names the stream whose executions a scheduler recovers, and
// when it ended (what a reassign_after_disconnect counts from).
type endedStream struct {
	ns, agentID, sessionID string
	end                    time.Time
}

// expireOrphans recovers the executions beats of the ended stream conn at
// their heartbeat deadlines, then deletes the stream's disconnected/ key.
// Due executions are started as soon as a slot is free (at most
// expiriesInFlight in flight on this scheduler), never a round at a time:
// each write joins whatever group commit is open. It returns early, leaving
// the key, when the scheduler stops.
func (a *agents) expireOrphans(conn endedStream, beats []*beat) {
	type pending struct {
		b  *beat
		at time.Time // when to try: the heartbeat deadline, or a retry
	}
	todo := make([]pending, 0, len(beats))
	for _, b := range beats {
		todo = append(todo, pending{b, b.lostAt(conn.end)})
	}
	slices.SortFunc(todo, func(x, y pending) int { return x.at.Compare(y.at) })
	// Buffered for every execution: a finished recovery never blocks.
	retry := make(chan *beat, len(beats))
	inFlight := 0
	for len(todo) > 0 || inFlight > 0 {
		now := a.opts.clock.Now()
		for len(todo) > 0 && !todo[0].at.After(now) {
			b := todo[0].b
			todo = todo[1:]
			select {
			case a.expiries <- struct{}{}:
			case <-a.stopping.Done():
				for ; inFlight > 0; inFlight-- {
					<-retry
				}
				return
			}
			inFlight++
			go func() {
				settled := a.expireOrphan(conn, b)
				<-a.expiries
				if settled {
					retry <- nil
				} else {
					retry <- b
				}
			}()
		}
		var timer <-chan time.Time
		var t clockwork.Timer
		if len(todo) > 0 {
			t = a.opts.clock.NewTimer(todo[0].at.Sub(now))
			timer = t.Chan()
		}
		select {
		case <-a.stopping.Done():
			// Left to the supervisor once the lease is revoked; the
			// recoveries in flight finish (bounded by their write's
			// timeout) so that none outlives Run.
			for ; inFlight > 0; inFlight-- {
				<-retry
			}
			return
		case <-timer:
		case b := <-retry:
			inFlight--
			if b != nil {
				at := a.opts.clock.Now().Add(expiryRetry)
				k, _ := slices.BinarySearchFunc(todo, at, func(p pending, at time.Time) int { return p.at.Compare(at) })
				todo = slices.Insert(todo, k, pending{b, at})
			}
		}
		if t != nil {
			t.Stop()
		}
	}
	ctx, cancel := context.WithTimeout(a.base, 2*time.Second)
	defer cancel()
	if err := a.store.DeleteDisconnected(ctx, conn.ns, conn.agentID, conn.sessionID); err != nil {
		// Its lease removes it at the latest; a supervisor then finds
		// nothing left to do.
		a.log.Debug("delete the disconnected agent's key", "agent_id", conn.agentID, "session_id", conn.sessionID, "err", err)
	}
}

// expireOrphan recovers one execution of a dropped agent whose heartbeat
// deadline passed, unless the agent took it back. It reports whether the
// execution is settled (recovered, or no longer this scheduler's to
// recover); false means try again.
func (a *agents) expireOrphan(conn endedStream, b *beat) bool {
	ctx, cancel := context.WithTimeout(a.base, 30*time.Second)
	defer cancel()
	actor := "scheduler/" + a.opts.id
	deadline := b.lostAt(conn.end)
	out := a.eng.applyRecovery(ctx, b.ref, nil, actor, nil, func(t *reevev1.Task, now time.Time) (*reevev1.RecoveryDecision, error) {
		if a.disp.watches(conn.agentID, b.ref) {
			return nil, taskstate.ErrStale // the agent is back on this scheduler
		}
		action, delay, err := taskstate.ExpireDisconnected(t, b.ref.GetStep(), b.ref.GetAttempt(), conn.agentID, b.last, deadline, actor, now)
		if err != nil {
			return nil, err
		}
		keepDetails(t, b.ref, b.details)
		return &reevev1.RecoveryDecision{Action: action.RecoveryAction(), Delay: durationpb.New(delay)}, nil
	})
	if out.GetApplied() {
		return true
	}
	st := status.FromProto(out.GetStatus())
	switch code := st.Code(); code {
	case codes.FailedPrecondition, codes.NotFound:
		return true // taken back, finished, deleted: nothing to recover
	default:
		if a.stopping.Err() == nil {
			a.log.Warn("recover a dropped agent's execution after its heartbeat deadline; trying again",
				"task_id", b.ref.GetTaskId(), "step", b.ref.GetStep(), "attempt", b.ref.GetAttempt(), "agent_id", conn.agentID,
				"code", code.String(), "err", st.Message())
		}
		return false
	}
}

// persistBeats shortens the complete-by of attempts whose agent's stream
// ended to their last heartbeat plus their heartbeat timeout, so that the
// supervisor recovers them at that deadline whatever happens to this
// scheduler. Used when the scheduler cannot keep them itself (it is
// stopping, it holds no lease, the disconnect could not be recorded). It is
// skipped once the scheduler stopped: agents then reconnect elsewhere and
// list what they run (the complete-by still covers one that never does).
func (a *agents) persistBeats(agentID string, beats []*beat) {
	if len(beats) == 0 || a.base.Err() != nil {
		return
	}
	end := a.opts.clock.Now()
	for _, b := range beats {
		a.work.goOptional(func() {
			// Generous: after a mass disconnect these writes queue behind
			// each other, and one that gives up leaves its attempt to its
			// complete-by.
			ctx, cancel := context.WithTimeout(a.base, 30*time.Second)
			defer cancel()
			ref := b.ref
			_, err := a.eng.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(),
				change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
					if a.disp.watches(agentID, ref) {
						return effects{}, taskstate.ErrStale // the agent is back on this scheduler
					}
					if err := taskstate.ShortenOnDisconnect(t, ref.GetStep(), ref.GetAttempt(), agentID, b.lostAt(end),
						"scheduler/"+a.opts.id, now); err != nil {
						return effects{}, err
					}
					keepDetails(t, ref, b.details)
					return effects{}, nil
				}})
			if err != nil && !errors.Is(err, taskstate.ErrStale) && !errors.Is(err, context.Canceled) {
				a.log.Warn("move complete-by to the heartbeat deadline after the agent's stream ended",
					"task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "err", err)
			}
		})
	}
}

// restoreDeadline adopts an attempt a reconnecting agent still runs
// (taskstate.RestoreOnReconnect: one write, which also tells a scheduler
// that saw the old stream end not to recover it), and returns the
// complete-by in force.
func (e *engine) restoreDeadline(ctx context.Context, ref *reevev1.StepRef, agentID string) (time.Time, error) {
	w, err := e.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(),
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			return effects{}, taskstate.RestoreOnReconnect(t, ref.GetStep(), ref.GetAttempt(), agentID, "scheduler/"+e.id, now)
		}})
	if err != nil {
		return time.Time{}, err
	}
	return taskstate.FindStep(w.after.GetTask(), ref.GetStep()).GetCompleteBy().AsTime(), nil
}

// beat is the in-memory liveness of one attempt whose step sets a
// heartbeat timeout or a reassign_after_disconnect (either may be 0: unset).
type beat struct {
	ref     *reevev1.StepRef
	timeout time.Duration   // heartbeat timeout
	grace   time.Duration   // reassign_after_disconnect
	last    time.Time       // last heartbeat (or dispatch, or adoption)
	details *structpb.Value // last Heartbeat.details; nil when none
}

func (b *beat) getDetails() *structpb.Value {
	if b == nil {
		return nil
	}
	return b.details
}

// keepDetails records an ending attempt's last heartbeat details on its
// step, for the next attempt (StepAssignment.heartbeat_details). Called
// inside the write that ends the attempt, after its transition succeeded.
func keepDetails(t *reevev1.Task, ref *reevev1.StepRef, details *structpb.Value) {
	if details == nil {
		return
	}
	if st := taskstate.FindStep(t, ref.GetStep()); st != nil {
		st.HeartbeatDetails = details
	}
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

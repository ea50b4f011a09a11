package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// An agent that connects again without an attempt its ended stream ran no
// longer runs it: Register.running must list every execution the agent
// still runs or holds a result for (docs/agent-protocol.md). Such an
// attempt is expired at once (taskstate.ExpireForgotten moves its
// complete-by to now and says why) and the supervisor recovers it as any
// expired attempt — retried, compensated or failed as its policy says —
// instead of at its complete-by.
//
// An ended stream's attempts that no other stream of its agent here holds
// are forgotten when a stream of the agent that registered after it does
// not hold them (the agent reconnected before this scheduler saw the old
// stream end), or else when the agent's next Register here does not list
// them: this scheduler remembers them until their complete-by, at most
// maxLeftAttempts in all. An agent that connects again to another
// scheduler gets them recovered at their complete-by (at their heartbeat
// deadline with a heartbeat timeout or reassign_after_disconnect). Agent
// ids must differ between processes, as the protocol says: a process that
// registers with the id of another whose stream ended gets that other's
// attempts recovered.

// maxLeftAttempts bounds the attempts of ended streams remembered; past it
// the oldest streams' are dropped (left to their complete-by).
const maxLeftAttempts = 100_000

// leftAttempts are the attempts of this scheduler's ended streams, by agent.
type leftAttempts struct {
	mu      sync.Mutex
	byAgent map[string]*leftOf // "<ns>/<agent-id>"
	n       int
}

type leftOf struct {
	at       time.Time            // when the last stream of them ended
	attempts map[string]time.Time // refKey -> complete-by
}

// remember keeps the attempts an ended stream of agentID in ns left, until
// their complete-by.
func (l *leftAttempts) remember(ns, agentID string, attempts map[string]time.Time, now time.Time) {
	if len(attempts) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAgent == nil {
		l.byAgent = map[string]*leftOf{}
	}
	key := ns + "/" + agentID
	of := l.byAgent[key]
	if of == nil {
		of = &leftOf{attempts: map[string]time.Time{}}
		l.byAgent[key] = of
	}
	of.at = now
	for k, by := range attempts {
		if _, ok := of.attempts[k]; !ok && by.After(now) {
			of.attempts[k] = by
			l.n++
		}
	}
	for l.n > maxLeftAttempts {
		l.dropOldest()
	}
}

// dropOldest forgets the agent whose stream ended longest ago. Called with
// mu held.
func (l *leftAttempts) dropOldest() {
	var oldest string
	var at time.Time
	for k, of := range l.byAgent {
		if oldest == "" || of.at.Before(at) {
			oldest, at = k, of.at
		}
	}
	l.n -= len(l.byAgent[oldest].attempts)
	delete(l.byAgent, oldest)
}

// take returns and forgets the attempts left by agentID's ended streams in
// ns whose complete-by is still ahead.
func (l *leftAttempts) take(ns, agentID string, now time.Time) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ns + "/" + agentID
	of := l.byAgent[key]
	if of == nil {
		return nil
	}
	delete(l.byAgent, key)
	l.n -= len(of.attempts)
	for k, by := range of.attempts {
		if !by.After(now) {
			delete(of.attempts, k)
		}
	}
	return of.attempts
}

// ended handles the attempts an ended stream left: expired at once when a
// newer stream of the agent registered without them, else remembered for
// the agent's next Register.
func (a *agents) ended(conn *agentConn, left map[string]time.Time, newer bool) {
	if newer {
		a.expireForgotten(conn.agentID, left)
		return
	}
	a.left.remember(conn.ns, conn.agentID, left, a.opts.clock.Now())
}

// forgotten expires the attempts of the agent's ended streams that the
// Register of conn (adopted by now) did not list.
func (a *agents) forgotten(conn *agentConn) {
	a.expireForgotten(conn.agentID, a.left.take(conn.ns, conn.agentID, a.opts.clock.Now()))
}

// expireForgotten expires, each in a write of its own, the attempts
// (refKey -> complete-by) no stream of agentID here holds.
func (a *agents) expireForgotten(agentID string, attempts map[string]time.Time) {
	for k := range attempts {
		ref, ok := parseRefKey(k)
		if !ok || a.disp.holds(agentID, k) {
			continue
		}
		a.work.goOptional(func() { a.eng.expireForgotten(ref, agentID) })
	}
}

// expireForgotten moves the complete-by of an attempt agentID connected
// again without to now (taskstate.ExpireForgotten): the supervisor
// recovers it.
func (e *engine) expireForgotten(ref *reevev1.StepRef, agentID string) {
	ctx, cancel := context.WithTimeout(e.base, 10*time.Second)
	defer cancel()
	_, err := e.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(),
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			return effects{}, taskstate.ExpireForgotten(t, ref.GetStep(), ref.GetAttempt(), agentID, "scheduler/"+e.id, now)
		}})
	if err != nil && !errors.Is(err, taskstate.ErrStale) && !errors.Is(err, taskstate.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		e.log.Warn("expire an attempt its agent connected again without", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "err", err)
		return
	}
	if err == nil {
		e.log.Info("agent connected again without its attempt; expired it for the supervisor to recover",
			"task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID)
	}
}

package failover

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// SupervisorFailover is one SIGKILL of the supervisor leader while the
// first attempts of demo.timeout tasks hang: they expire while no leader
// runs, and the standby recovers them once it wins.
type SupervisorFailover struct {
	Round         int    `json:"round"`
	Killed        string `json:"killed"`
	NewLeader     string `json:"new_leader"`
	SessionTTLSec int    `json:"session_ttl_s"`
	Tasks         int    `json:"tasks"`
	// LeaseGoneMs: kill → the killed leader's election key deleted (its
	// session lease expired), as seen by a watch of this process.
	LeaseGoneMs float64 `json:"lease_gone_ms"`
	// FirstRecoveryMs: kill → the first step.expired event written for a
	// supervisor/<id> decision; LastRecoveryMs: the same for the last task.
	FirstRecoveryMs float64 `json:"first_recovery_ms"`
	LastRecoveryMs  float64 `json:"last_recovery_ms"`
	// RecoveryAfterLeaseMs: the lease deleted → the first recovery: the new
	// leader's campaign, first pass and RecoverSteps call.
	RecoveryAfterLeaseMs float64 `json:"recovery_after_lease_ms"`
	// FirstRedispatchMs: kill → the first attempt 2 dispatched (after the
	// step's 200 ms retry backoff).
	FirstRedispatchMs float64 `json:"first_redispatch_ms"`
	// ExpiredForMs: how long the first recovered step had been past its
	// complete-by when it was recovered (> 0: it had already expired when
	// the standby took over).
	ExpiredForMs float64 `json:"expired_for_ms"`
	// ExpiredBeforeTakeover: every step's complete-by had passed when the
	// killed leader's lease was deleted, so no leader ran when they expired.
	ExpiredBeforeTakeover bool `json:"expired_before_takeover"`
	// TargetMs is the session TTL + 500 ms (issue 13); Met: FirstRecoveryMs
	// within it.
	TargetMs float64 `json:"target_ms"`
	Met      bool    `json:"met"`
}

// SupervisorRound submits tasks demo.timeout tasks, waits until each first
// attempt is dispatched (it hangs; complete-by 2 s later), SIGKILLs the
// supervisor leader at once, and waits until every task's step was
// recovered and dispatched again. It then starts the killed supervisor
// again and waits until it campaigns (a standby for the next round). The
// session TTL must be at least 3 s so that the steps expire before the
// lease does (it expires 2/3 TTL to TTL after the kill).
func (m *Measurer) SupervisorRound(ctx context.Context, round, tasks int) (SupervisorFailover, error) {
	r := SupervisorFailover{Round: round, Tasks: tasks}
	ttl := m.c.SessionTTL()
	r.SessionTTLSec, r.TargetMs = ttl, float64(ttl*1000+500)
	// A leader and a standby, campaigning.
	var cands *clientv3.GetResponse
	if err := poll(ctx, "a supervisor leader and a standby", func(ctx context.Context) (bool, error) {
		var err error
		cands, err = m.cli.Get(ctx, electionPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return err == nil && len(cands.Kvs) >= 2, err
	}); err != nil {
		return r, err
	}
	leaderKey, leaderID := string(cands.Kvs[0].Key), string(cands.Kvs[0].Value)
	r.Killed = leaderID
	victim, _, err := m.process(m.c.Supervisors, leaderID)
	if err != nil {
		return r, err
	}

	// Tasks whose first attempt hangs.
	ids := make([]string, tasks)
	stamp := time.Now().UnixNano()
	for i := range ids {
		ids[i] = fmt.Sprintf("failover-sup-%d-%d-%d", stamp, round, i)
		in, _ := structpb.NewValue(map[string]any{"order_id": ids[i]})
		_, err := m.clients[i%len(m.clients)].SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: ids[i],
			Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.timeout"}}, Input: in})
		if err != nil {
			return r, fmt.Errorf("submit %s: %w", ids[i], err)
		}
	}
	completeBy := map[string]time.Time{}
	for _, id := range ids {
		if err := poll(ctx, id+" attempt 1 dispatched", func(ctx context.Context) (bool, error) {
			t, err := m.getTask(ctx, id)
			if err != nil {
				return false, err
			}
			s := t.GetSteps()[0]
			if s.GetAttempt() == 1 && s.GetCompleteBy() != nil {
				completeBy[id] = s.GetCompleteBy().AsTime()
				return true, nil
			}
			return false, nil
		}); err != nil {
			return r, err
		}
	}

	w := watchFrom(ctx, m.cli, leaderKey, cands.Header.Revision)
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		w.close()
		return r, err
	}
	for _, s := range w.until(ctx, func(all []seen) bool { return len(all) > 0 }, time.Duration(ttl)*time.Second+30*time.Second) {
		if s.err == nil && s.ev.Type == clientv3.EventTypeDelete {
			r.LeaseGoneMs = ms(s.at.Sub(killed))
			break
		}
	}
	if r.LeaseGoneMs == 0 {
		return r, fmt.Errorf("failover: the killed leader's election key %s was not deleted", leaderKey)
	}

	// Every task recovered and its step dispatched again.
	var first, last, redispatch time.Time
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, id := range ids {
		var rec, dis time.Time
		var by string
		if err := poll(wctx, id+" recovered and dispatched again", func(ctx context.Context) (bool, error) {
			t, err := m.getTask(ctx, id)
			if err != nil {
				return false, err
			}
			for _, e := range t.GetHistory() {
				at := e.GetTime().AsTime()
				if sup, ok := actorIs(e.GetActor(), "supervisor"); ok && e.GetKind() == "step.expired" && e.GetAttempt() == 1 && rec.IsZero() {
					rec, by = at, sup
				}
				if e.GetKind() == "step.dispatched" && e.GetAttempt() == 2 && dis.IsZero() {
					dis = at
				}
			}
			return !rec.IsZero() && !dis.IsZero(), nil
		}); err != nil {
			return r, err
		}
		if by == leaderID {
			return r, fmt.Errorf("failover: %s recovered by %s, the killed leader", id, by)
		}
		if rec.Before(killed) {
			return r, fmt.Errorf("failover: %s recovered at %v, before the kill at %v: the round is void", id, rec, killed)
		}
		if first.IsZero() || rec.Before(first) {
			first, r.NewLeader = rec, by
			r.ExpiredForMs = ms(rec.Sub(completeBy[id]))
		}
		if rec.After(last) {
			last = rec
		}
		if redispatch.IsZero() || dis.Before(redispatch) {
			redispatch = dis
		}
	}
	leaseGone := killed.Add(time.Duration(r.LeaseGoneMs * float64(time.Millisecond)))
	r.ExpiredBeforeTakeover = true
	for _, by := range completeBy {
		r.ExpiredBeforeTakeover = r.ExpiredBeforeTakeover && by.Before(leaseGone)
	}
	r.FirstRecoveryMs = ms(first.Sub(killed))
	r.LastRecoveryMs = ms(last.Sub(killed))
	r.RecoveryAfterLeaseMs = r.FirstRecoveryMs - r.LeaseGoneMs
	r.FirstRedispatchMs = ms(redispatch.Sub(killed))
	r.Met = r.FirstRecoveryMs <= r.TargetMs
	for _, id := range ids {
		if err := m.waitSucceeded(wctx, id); err != nil {
			return r, err
		}
	}

	// The killed supervisor comes back as the standby of the next round.
	if err := victim.Start(); err != nil {
		return r, err
	}
	return r, poll(ctx, "the restarted supervisor campaigning", func(ctx context.Context) (bool, error) {
		resp, err := m.cli.Get(ctx, electionPrefix, clientv3.WithPrefix())
		if err != nil {
			return false, err
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == leaderID {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitSucceeded waits until the task is terminal and fails unless it
// SUCCEEDED.
func (m *Measurer) waitSucceeded(ctx context.Context, id string) error {
	var st reevev1.TaskState
	var reason string
	err := poll(ctx, id+" terminal", func(ctx context.Context) (bool, error) {
		t, err := m.getTask(ctx, id)
		if err != nil {
			return false, err
		}
		st, reason = t.GetState(), t.GetReason()
		switch st {
		case reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if st != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		return fmt.Errorf("failover: task %s ended %v: %s", id, st, reason)
	}
	return nil
}

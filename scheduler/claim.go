package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// The task writes the dispatcher (dispatch.go) starts: a claim, a take-back
// and a heartbeat's expiry.

// claimTimeout bounds one claim transaction.
const claimTimeout = 10 * time.Second

// claim dispatches the ready execution e to agentID: one etcd transaction
// that marks it running (with complete-by and locked-by) and takes it off the
// ready queue. It returns the assignment to send. It runs on the server's
// lifetime context, not the dispatcher's: a shutdown that stops dispatching
// must not cut off a claim whose write may already be committing.
func (s *Server) claim(e *storev1.ReadyEntry, agentID string) (*reevev1.StepAssignment, error) {
	ctx, cancel := context.WithTimeout(s.base, claimTimeout)
	defer cancel()
	_, after, err := s.store.UpdateTask(ctx, e.GetNamespace(), e.GetTaskId(), func(t *reevev1.Task) error {
		return taskstate.Claim(t, e.GetStep(), e.GetAttempt(), s.opts.id, agentID, s.opts.clock.Now())
	})
	if err != nil {
		return nil, err
	}
	t := after.GetTask()
	st := taskstate.FindStep(t, e.GetStep())
	a := assignment(t, st)
	s.tel.claimed(after, st, a, s.opts.id, agentID, s.opts.clock.Now())
	return a, nil
}

// assignment builds what an agent needs to run the step's current execution.
func assignment(t *reevev1.Task, st *reevev1.Step) *reevev1.StepAssignment {
	spec := taskstate.Spec(t, st.GetName())
	a := &reevev1.StepAssignment{
		Ref:                     taskstate.Ref(t, st),
		Type:                    taskstate.ExecutionType(t, st),
		IdempotencyKey:          st.GetIdempotencyKey(),
		Input:                   t.GetInput(),
		Config:                  spec.GetConfig(),
		CompleteBy:              st.GetCompleteBy(),
		HeartbeatTimeout:        spec.GetHeartbeatTimeout(),
		ReassignAfterDisconnect: spec.GetReassignAfterDisconnect(),
		DependencyOutputs:       map[string]*structpb.Value{},
	}
	if taskstate.Compensating(st) {
		// The compensation gets the output of the step it undoes.
		a.Compensation = true
		a.IdempotencyKey = fmt.Sprintf("%s:compensate", st.GetIdempotencyKey())
		a.Config = spec.GetCompensation().GetConfig()
		a.DependencyOutputs[st.GetName()] = st.GetOutput()
		return a
	}
	for _, dep := range spec.GetDependsOn() {
		a.DependencyOutputs[dep] = taskstate.FindStep(t, dep).GetOutput()
	}
	return a
}

// expireNow moves the complete-by of an attempt whose agent missed its
// heartbeat to now: the supervisor then recovers it like any expired attempt.
func (s *Server) expireNow(ref *reevev1.StepRef) {
	ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
	defer cancel()
	_, _, err := s.store.UpdateTask(ctx, ref.GetNamespace(), ref.GetTaskId(), func(t *reevev1.Task) error {
		return taskstate.ExpireNow(t, ref.GetStep(), ref.GetAttempt(), "scheduler/"+s.opts.id, s.opts.clock.Now())
	})
	if err != nil && !errors.Is(err, taskstate.ErrStale) {
		s.log.Warn("expire attempt after missed heartbeat", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "err", err)
	}
}

// takeBack queues again an attempt dispatched to agentID that the agent
// never got or never acknowledged (taskstate.Unacknowledged): it never
// started, so the next attempt is ready at once and no failure is counted.
// Nothing changes when the attempt is not (or no longer) the step's current
// one held by agentID, e.g. when the claim that would have dispatched it
// never committed. Retried while etcd is unavailable, for a bounded time;
// the attempt's complete-by covers a take-back that never lands.
func (s *Server) takeBack(ref *reevev1.StepRef, agentID, reason string) {
	_, _, err := s.updateUntil(time.Now().Add(claimTimeout), ref, func(t *reevev1.Task) error {
		return taskstate.Unacknowledged(t, ref.GetStep(), ref.GetAttempt(), agentID, reason, "scheduler/"+s.opts.id, s.opts.clock.Now())
	})
	if err != nil && !errors.Is(err, taskstate.ErrStale) && !errors.Is(err, taskstate.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("take back undelivered attempt", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "err", err)
	}
}

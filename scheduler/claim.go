package scheduler

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// claim dispatches the ready execution e to agentID: one etcd transaction
// that marks it running (with complete-by and locked-by) and takes it off the
// ready queue. It returns the assignment to send.
func (s *Server) claim(ctx context.Context, e *storev1.ReadyEntry, agentID string) (*reevev1.StepAssignment, error) {
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

package scheduler_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Timer decisions (issue 35) are checked as any RecoverSteps decision: a
// task-level key's decision takes attempt 0 and its own actions, and one
// that comes early (a sleep or a start not due, by the scheduler's clock)
// is refused and changes nothing, whatever action it names, under a fence
// that holds.
func TestTimerDecisionsRefusals(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	wf := &reevev1.Workflow{Name: "w", TaskTimeout: durationpb.New(2 * time.Hour), Steps: []*reevev1.StepSpec{
		{Name: "nap", Sleep: durationpb.New(time.Hour)}, step("x", "t", "nap")}}
	for _, req := range []*reevev1.SubmitTaskRequest{
		{TaskId: "napping", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}},
		{TaskId: "later", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}, StartTime: timestamppb.New(time.Now().Add(time.Hour))},
	} {
		if _, err := c.SubmitTask(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tasks := func() []*reevev1.Task {
		var out []*reevev1.Task
		for _, id := range []string{"napping", "later"} {
			got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got.GetTask())
		}
		return out
	}
	before := tasks()
	if st := before[0].GetSteps()[0]; st.GetState() != reevev1.StepState_STEP_STATE_WAITING || st.GetAttempt() != 1 {
		t.Fatalf("sleep step %v attempt %d", st.GetState(), st.GetAttempt())
	}

	sess, err := concurrency.NewSession(env.Etcd.Client(), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close() }()
	el := concurrency.NewElection(sess, "/reeve/supervisor/election")
	if err := el.Campaign(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: el.Key(), Revision: el.Rev(), SupervisorId: "test"}
	const (
		retry      = reevev1.RecoveryAction_RECOVERY_ACTION_RETRY
		fail       = reevev1.RecoveryAction_RECOVERY_ACTION_FAIL
		compensate = reevev1.RecoveryAction_RECOVERY_ACTION_COMPENSATE
	)
	d := func(id, step string, attempt int32, a reevev1.RecoveryAction) *reevev1.RecoveryDecision {
		return &reevev1.RecoveryDecision{TaskId: id, Step: step, Attempt: attempt, Action: a}
	}
	delayed := d("later", "@start", 0, retry)
	delayed.Delay = durationpb.New(time.Second)
	resp, err := sup.RecoverSteps(ctx, &reevev1.RecoverStepsRequest{Fence: fence, Decisions: []*reevev1.RecoveryDecision{
		d("later", "@start", 1, retry),
		d("later", "@start", 0, fail),
		d("later", "@deadline", 0, retry),
		delayed,
		d("later", "@start", 0, retry),         // not due
		d("later", "@deadline", 0, compensate), // not due
		d("napping", "nap", 1, retry),          // not due
		d("napping", "nap", 1, fail),           // not due: a sleep is never failed
		d("napping", "nap", 2, retry),          // no such attempt
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		code  codes.Code
		field string
	}{
		{codes.InvalidArgument, "decisions[0].attempt"},
		{codes.InvalidArgument, "decisions[1].action"},
		{codes.InvalidArgument, "decisions[2].action"},
		{codes.InvalidArgument, "decisions[3].delay"},
		{codes.FailedPrecondition, ""},
		{codes.FailedPrecondition, ""},
		{codes.FailedPrecondition, ""},
		{codes.FailedPrecondition, ""},
		{codes.FailedPrecondition, ""},
	}
	for i, w := range want {
		o := resp.GetOutcomes()[i]
		st := status.FromProto(o.GetStatus())
		if o.GetApplied() || st.Code() != w.code || fieldOf(st) != w.field {
			t.Errorf("outcome %d: %v, want %v naming %q", i, o, w.code, w.field)
		}
	}
	for i, got := range tasks() {
		if !proto.Equal(before[i], got) {
			t.Fatalf("refused decisions changed task %s: %v", got.GetId(), got)
		}
	}
}

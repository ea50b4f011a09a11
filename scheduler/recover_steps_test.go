package scheduler_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// RecoverSteps refuses a request without a valid fence as a whole, answers
// each malformed decision with INVALID_ARGUMENT naming decisions[i].field,
// and a fence that does not hold (no such election key) refuses every
// decision with FAILED_PRECONDITION and changes nothing.
func TestRecoverStepsRefusals(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "real", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{
		InlineWorkflow: &reevev1.Workflow{Name: "w", Steps: []*reevev1.StepSpec{step("x", "t")}}}}); err != nil {
		t.Fatal(err)
	}
	before, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "real"})
	if err != nil {
		t.Fatal(err)
	}
	retry := func(attempt int32) *reevev1.RecoveryDecision {
		return &reevev1.RecoveryDecision{TaskId: "real", Step: "x", Attempt: attempt, Action: reevev1.RecoveryAction_RECOVERY_ACTION_RETRY}
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/nobody", Revision: 1, SupervisorId: "s"}

	whole := []struct {
		name  string
		req   *reevev1.RecoverStepsRequest
		field string
	}{
		{"no fence", &reevev1.RecoverStepsRequest{Decisions: []*reevev1.RecoveryDecision{retry(1)}}, "fence"},
		{"foreign fence key", &reevev1.RecoverStepsRequest{Fence: &reevev1.Fence{ElectionKey: "/reeve/tasks/default/real", Revision: 1, SupervisorId: "s"}}, "fence.election_key"},
		{"too many", &reevev1.RecoverStepsRequest{Fence: fence, Decisions: make([]*reevev1.RecoveryDecision, 1001)}, "decisions"},
	}
	for _, tc := range whole {
		_, err := sup.RecoverSteps(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", tc.name, err, tc.field)
		}
	}

	noAction := retry(1)
	noAction.Action = reevev1.RecoveryAction_RECOVERY_ACTION_UNSPECIFIED
	delayedFail := retry(1)
	delayedFail.Action, delayedFail.Delay = reevev1.RecoveryAction_RECOVERY_ACTION_FAIL, durationpb.New(0)
	resp, err := sup.RecoverSteps(ctx, &reevev1.RecoverStepsRequest{Fence: fence, Decisions: []*reevev1.RecoveryDecision{
		retry(0), noAction, delayedFail, {TaskId: "real", Step: "a/b", Attempt: 1, Action: reevev1.RecoveryAction_RECOVERY_ACTION_FAIL}, retry(1),
		{TaskId: "real", Step: "x", Attempt: 1, Action: reevev1.RecoveryAction_RECOVERY_ACTION_AGENT_LOST},
		{TaskId: "real", Step: "x", Attempt: 1, Action: reevev1.RecoveryAction_RECOVERY_ACTION_RETRY, AgentId: "a"},
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
		{codes.InvalidArgument, "decisions[2].delay"},
		{codes.InvalidArgument, "decisions[3].step"},
		{codes.FailedPrecondition, ""},
		{codes.InvalidArgument, "decisions[5].agent_id"},
		{codes.InvalidArgument, "decisions[6].agent_id"},
	}
	if len(resp.GetOutcomes()) != len(want) {
		t.Fatalf("%d outcomes, want %d", len(resp.GetOutcomes()), len(want))
	}
	for i, w := range want {
		o := resp.GetOutcomes()[i]
		st := status.FromProto(o.GetStatus())
		if o.GetApplied() || st.Code() != w.code || fieldOf(st) != w.field || reasonOf(st) == "" {
			t.Errorf("outcome %d: %v, want %v naming %q with a reason", i, o, w.code, w.field)
		}
	}
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "real"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before.GetTask(), got.GetTask()) {
		t.Fatalf("refused decisions changed the task: %v", got.GetTask())
	}
}

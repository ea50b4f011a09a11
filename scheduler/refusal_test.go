package scheduler_test

import (
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Defect 10: a refused result says what actually happened — another agent's
// execution, a duplicate, a step never dispatched, an unknown step — with
// no internal package name, and changes nothing.
func TestResultAckSaysWhyAResultWasRefused(t *testing.T) {
	env, s, c := newEnv(t)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: inline(step("charge", "pay"), step("ship", "ship"))})
	holder := testenv.ConnectRaw(t, s.Addr, register("a-2", 1, "pay"))
	ref := holder.NextAssignment(wait).GetRef()
	other := testenv.ConnectRaw(t, s.Addr, register("a-1", 1, "pay"))

	refuse := func(t *testing.T, a *testenv.RawAgent, r *reevev1.StepRef, want string) {
		t.Helper()
		before := testenv.DataKeys(t, env.Etcd.Client())
		a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: r}}})
		ack := a.NextResultAck(wait)
		if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.FailedPrecondition || !strings.Contains(ack.GetStatus().GetMessage(), want) || strings.Contains(ack.GetStatus().GetMessage(), "taskstate") {
			t.Fatalf("ack %v, want FAILED_PRECONDITION saying %q", ack, want)
		}
		if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
			t.Fatal("a refused result changed etcd")
		}
	}
	refuse(t, other, ref, `attempt 1 of step "charge" is held by agent a-2, not a-1`)
	refuse(t, other, &reevev1.StepRef{Namespace: "default", TaskId: "t-1", Step: "ship", Attempt: 1}, `attempt 1 of step "ship" was never dispatched: it is PENDING, queued for an agent`)
	refuse(t, other, &reevev1.StepRef{Namespace: "default", TaskId: "t-1", Step: "x", Attempt: 1}, `task t-1 has no step "x"`)
	if ack := holder.Succeed(ref, nil); !ack.GetAccepted() {
		t.Fatalf("the holder's result was refused: %v", ack)
	}
	refuse(t, holder, ref, `attempt 1 of step "charge" already SUCCEEDED: a result for it was accepted before (a duplicate)`)
}

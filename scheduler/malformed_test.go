package scheduler_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A malformed result gets a ResultAck naming what is wrong, changes nothing,
// and leaves the stream up: the agent's other executions are not cut off.
func TestMalformedResultIsRefusedOnItsOwn(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 1, "x"))
	task := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))})
	as := a.NextAssignment(wait)
	ref := as.GetRef()

	cases := []struct {
		name  string
		res   *reevev1.StepResult
		field string
	}{
		{"no ref", &reevev1.StepResult{}, "result.ref"},
		{"no task id", &reevev1.StepResult{Ref: &reevev1.StepRef{Namespace: "default", Step: "a", Attempt: 1}}, "result.ref.task_id"},
		{"error message over 4 KiB", &reevev1.StepResult{Ref: ref, Error: &reevev1.StepError{Message: strings.Repeat("é", 2049)}}, "result.error.message"},
		{"error code too long", &reevev1.StepResult{Ref: ref, Error: &reevev1.StepError{Code: strings.Repeat("c", 64)}}, "result.error.code"},
		{"output over 64 KiB", &reevev1.StepResult{Ref: ref, Output: testenv.Value(t, strings.Repeat("x", 70<<10))}, "result.output"},
	}
	for _, tc := range cases {
		a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: tc.res}})
		ack := a.NextResultAck(wait)
		if ack.GetAccepted() || codes.Code(ack.GetCode()) != codes.InvalidArgument || !strings.Contains(ack.GetMessage(), tc.field) {
			t.Errorf("%s: ack %v, want INVALID_ARGUMENT naming %s", tc.name, ack, tc.field)
		}
	}
	if got := getTask(t, c, task.GetId()); stepOf(got, "a").GetState() != reevev1.StepState_STEP_STATE_RUNNING {
		t.Fatalf("a malformed result changed the step: %v", stepOf(got, "a").GetState())
	}
	if ack := a.Succeed(ref, map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("valid result after the malformed ones refused: %v", ack)
	}
}

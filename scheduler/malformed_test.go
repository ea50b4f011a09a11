package scheduler_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
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
		{"error message over 4 KiB", &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Message: strings.Repeat("é", 2049)}}}, "result.error.message"},
		{"error code too long", &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Code: strings.Repeat("c", 64)}}}, "result.error.code"},
	}
	for _, tc := range cases {
		a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: tc.res}})
		ack := a.NextResultAck(wait)
		if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.InvalidArgument || !strings.Contains(ack.GetStatus().GetMessage(), tc.field) {
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

// A 5 MiB result (over gRPC's default 4 MiB receive limit) is refused on
// its own: the step fails for good with output_too_large, and the agent's
// stream, with its other executions, stays up.
func TestOversizedResultIsRefusedOnItsOwn(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 2, "x"))
	big := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))})
	other := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))})
	refs := map[string]*reevev1.StepRef{}
	for range 2 {
		as := a.NextAssignment(wait)
		refs[as.GetRef().GetTaskId()] = as.GetRef()
	}

	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{
		Ref: refs[big.GetId()], Outcome: &reevev1.StepResult_Output{Output: testenv.Value(t, strings.Repeat("x", 5<<20))},
	}}})
	ack := a.NextResultAck(wait)
	if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.InvalidArgument || !strings.Contains(ack.GetStatus().GetMessage(), "output_too_large") {
		t.Fatalf("ack %v, want INVALID_ARGUMENT saying the step failed with output_too_large", ack)
	}
	got := stepOf(testenv.WaitTask(t, c, "default", big.GetId(), wait), "a")
	if got.GetState() != reevev1.StepState_STEP_STATE_FAILED || got.GetLastError().GetCode() != "output_too_large" || got.GetAttempt() != 1 {
		t.Fatalf("step %v at attempt %d, error %v; want FAILED after one attempt with output_too_large", got.GetState(), got.GetAttempt(), got.GetLastError())
	}
	if ack := a.Succeed(refs[other.GetId()], map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("the other execution's result after the oversized one: %v", ack)
	}
}

// A Connect stream that never sends Register ends with DEADLINE_EXCEEDED
// naming register; past the cap of streams waiting to register, a new one
// ends at once with RESOURCE_EXHAUSTED.
func TestUnregisteredStreamsAreBounded(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithRegisterTimeout(3*time.Second), scheduler.WithMaxUnregisteredStreams(2))
	cc := testenv.Dial(t, s.Addr)
	open := func(timeout time.Duration) reevev1.AgentService_ConnectClient {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		t.Cleanup(cancel)
		st, err := reevev1.NewAgentServiceClient(cc).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Three streams that never register, with room for two: one is refused
	// at once, the other two end at the register deadline.
	var codesSeen []codes.Code
	start := time.Now()
	for _, st := range []reevev1.AgentService_ConnectClient{open(wait), open(wait), open(wait)} {
		_, err := st.Recv()
		if !strings.Contains(status.Convert(err).Message(), "register") {
			t.Fatalf("unregistered stream ended with %v, want a message naming register", err)
		}
		codesSeen = append(codesSeen, status.Code(err))
	}
	slices.Sort(codesSeen)
	if want := []codes.Code{codes.DeadlineExceeded, codes.DeadlineExceeded, codes.ResourceExhausted}; !slices.Equal(codesSeen, want) {
		t.Fatalf("unregistered streams ended with %v, want %v", codesSeen, want)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("unregistered streams held for %v", waited)
	}
	// Registering within the deadline still works.
	testenv.ConnectRaw(t, s.Addr, register("a", 1, "x"))
}

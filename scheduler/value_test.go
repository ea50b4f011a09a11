package scheduler_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// kindlessValue is {"items": [1, "two", <a Value with no kind>]}, as
// Python's Value() makes one.
func kindlessValue(t *testing.T) *structpb.Value {
	t.Helper()
	v := testenv.Value(t, map[string]any{"items": []any{1, "two", nil}})
	v.GetStructValue().GetFields()["items"].GetListValue().Values[2] = &structpb.Value{}
	return v
}

// Defect 9: a Value with no kind set is refused where it enters — task
// input, step config, result output — naming its path, and nothing is
// written; the namespace stays listable.
func TestValueWithNoKindIsRefused(t *testing.T) {
	env, s, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	withConfig := step("x", "t")
	withConfig.Config = kindlessValue(t)
	for _, tc := range []struct {
		name string
		req  *reevev1.SubmitTaskRequest
		want string
	}{
		{"input", &reevev1.SubmitTaskRequest{TaskId: "bad", Workflow: inline(step("x", "t")), Input: kindlessValue(t)}, "input.items[2]: a google.protobuf.Value with no kind set"},
		{"top-level input", &reevev1.SubmitTaskRequest{TaskId: "bad", Workflow: inline(step("x", "t")), Input: &structpb.Value{}}, "input: a google.protobuf.Value with no kind set"},
		{"step config", &reevev1.SubmitTaskRequest{TaskId: "bad", Workflow: inline(withConfig)}, "inline_workflow.steps[0].config.items[2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testenv.DataKeys(t, env.Etcd.Client())
			_, err := c.SubmitTask(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("got %v, want INVALID_ARGUMENT naming %q", err, tc.want)
			}
			if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
				t.Fatal("a refused submission changed etcd")
			}
		})
	}

	// A result whose output has such a value is refused on its own; the
	// stream lives on and a good result for the same attempt is accepted.
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "good", Workflow: inline(step("x", "t"))})
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 1, "t"))
	ref := agent.NextAssignment(wait).GetRef()
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Output{Output: kindlessValue(t)}}}})
	ack := agent.NextResultAck(wait)
	if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.InvalidArgument || !strings.Contains(ack.GetStatus().GetMessage(), "result.output.items[2]") {
		t.Fatalf("ack %v, want a refusal with INVALID_ARGUMENT naming result.output.items[2]", ack)
	}
	if ack := agent.Succeed(ref, map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("good result refused: %v", ack)
	}
	if _, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{}); err != nil {
		t.Fatalf("list tasks: %v", err)
	}
}

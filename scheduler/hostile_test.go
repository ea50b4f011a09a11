package scheduler_test

import (
	"context"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// deep returns a JSON value nested n lists deep.
func deep(n int) *structpb.Value {
	v := structpb.NewNullValue()
	for range n {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

// TestHostileInputIsRefusedOnEveryRPC drives every RPC with malformed,
// oversized and hostile input: each call fails with the expected code and a
// message naming the field, and etcd is unchanged.
func TestHostileInputIsRefusedOnEveryRPC(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	// One real task, so that calls naming it get past "not found".
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "real", Workflow: inline(step("x", "t"))})

	huge := strings.Repeat("x", 5<<20) // over gRPC's default 4 MiB message limit, under the scheduler's 8 MiB
	nul := "a\x00b"
	traversal := "../../etc"
	newline := "ok\n"
	emoji := "näme☃"
	badTimeout := step("a", "t")
	badTimeout.Timeout = durationpb.New(48 * time.Hour)
	negTimeout := step("a", "t")
	negTimeout.Timeout = &durationpb.Duration{Seconds: -1}
	badHB := step("a", "t")
	badHB.HeartbeatTimeout = durationpb.New(time.Hour)
	many := make([]*reevev1.StepSpec, 101)
	for i := range many {
		many[i] = step("s"+strings.Repeat("0", 3)+string(rune('a'+i%26))+string(rune('a'+i/26)), "t")
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/x", Revision: 1, SupervisorId: "s"}

	type call = func(context.Context) error
	unary := func(f func(context.Context) (any, error)) call {
		return func(ctx context.Context) error { _, err := f(ctx); return err }
	}
	cases := []struct {
		name  string
		call  call
		code  codes.Code
		field string
	}{
		// SubmitTask
		{"submit: NUL in task id", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: nul, Workflow: inline(step("a", "t"))})
		}), codes.InvalidArgument, "task_id"},
		{"submit: path traversal in namespace", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: traversal, Workflow: inline(step("a", "t"))})
		}), codes.InvalidArgument, "namespace"},
		{"submit: trailing newline in namespace", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: newline, Workflow: inline(step("a", "t"))})
		}), codes.InvalidArgument, "namespace"},
		{"submit: unicode step name", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step(emoji, "t"))})
		}), codes.InvalidArgument, "inline_workflow.steps[0].name"},
		{"submit: timeout over 24h", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(badTimeout)})
		}), codes.InvalidArgument, "inline_workflow.steps[0].timeout"},
		{"submit: negative timeout", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(negTimeout)})
		}), codes.InvalidArgument, "inline_workflow.steps[0].timeout"},
		{"submit: heartbeat over the timeout", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(badHB)})
		}), codes.InvalidArgument, "heartbeatTimeout"},
		{"submit: 101 steps", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(many...)})
		}), codes.InvalidArgument, "inline_workflow.steps"},
		{"submit: NaN in input", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), Input: structpb.NewNumberValue(math.NaN())})
		}), codes.InvalidArgument, "input"},
		{"submit: input nested 100 deep", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), Input: deep(100)})
		}), codes.InvalidArgument, "input"},
		{"submit: 5 MiB message", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), Input: structpb.NewStringValue(huge)})
		}), codes.InvalidArgument, "input"},
		{"submit: 9 MiB message, over the receive limit", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), Input: structpb.NewStringValue(huge + huge[:4<<20])})
		}), codes.ResourceExhausted, "message larger than max"},
		{"submit: unknown workflow", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "ghost"}}})
		}), codes.NotFound, "ghost"},
		{"submit: start time two years ahead", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), StartTime: timestamppb.New(time.Now().Add(2 * 365 * 24 * time.Hour))})
		}), codes.InvalidArgument, "start_time"},
		{"submit: invalid start time", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), StartTime: &timestamppb.Timestamp{Seconds: -1 << 62}})
		}), codes.InvalidArgument, "start_time"},
		{"submit: zero task timeout", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), TaskTimeout: durationpb.New(0)})
		}), codes.InvalidArgument, "task_timeout"},
		{"submit: sleep of a millisecond", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(&reevev1.StepSpec{Name: "a", Sleep: durationpb.New(time.Millisecond)})})
		}), codes.InvalidArgument, "inline_workflow.steps[0].sleep"},
		{"submit: sleep step with a type", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(&reevev1.StepSpec{Name: "a", Type: "t", Sleep: durationpb.New(time.Minute)})})
		}), codes.InvalidArgument, "inline_workflow.steps[0].type"},
		{"submit: task timeout of two years", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "w",
				TaskTimeout: durationpb.New(2 * 365 * 24 * time.Hour), Steps: []*reevev1.StepSpec{step("a", "t")}}}})
		}), codes.InvalidArgument, "inline_workflow.taskTimeout"},
		{"submit: negative workflow version", unary(func(ctx context.Context) (any, error) {
			return c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "w", Version: -1}}})
		}), codes.InvalidArgument, "version"},
		// GetTask, ListTasks, WatchTask, CancelTask
		{"get: task id with slash", unary(func(ctx context.Context) (any, error) {
			return c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "real/../x"})
		}), codes.InvalidArgument, "task_id"},
		{"list: negative page size", unary(func(ctx context.Context) (any, error) {
			return c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: -1})
		}), codes.InvalidArgument, "page_size"},
		{"list: garbage page token", unary(func(ctx context.Context) (any, error) {
			return c.ListTasks(ctx, &reevev1.ListTasksRequest{PageToken: "%%%"})
		}), codes.InvalidArgument, "page_token"},
		{"list: unknown state", unary(func(ctx context.Context) (any, error) {
			return c.ListTasks(ctx, &reevev1.ListTasksRequest{State: 99})
		}), codes.InvalidArgument, "state"},
		{"watch: bad namespace", func(ctx context.Context) error {
			st, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: "NS", TaskId: "real"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, codes.InvalidArgument, "namespace"},
		{"watch: missing task", func(ctx context.Context) error {
			st, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: "ghost"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, codes.NotFound, "ghost"},
		{"cancel: NUL in reason over 1 KiB", unary(func(ctx context.Context) (any, error) {
			return c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "real", Reason: strings.Repeat(nul, 400)})
		}), codes.InvalidArgument, "reason"},
		// Workflows
		{"register: no workflow", unary(func(ctx context.Context) (any, error) {
			return c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{})
		}), codes.InvalidArgument, "workflow"},
		{"register: traversal in name", unary(func(ctx context.Context) (any, error) {
			return c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: traversal, Steps: []*reevev1.StepSpec{step("a", "t")}}})
		}), codes.InvalidArgument, "workflow.name"},
		{"register: description over 1 KiB", unary(func(ctx context.Context) (any, error) {
			return c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "w", Description: strings.Repeat("d", 2000), Steps: []*reevev1.StepSpec{step("a", "t")}}})
		}), codes.InvalidArgument, "workflow.description"},
		{"get workflow: NUL in name", unary(func(ctx context.Context) (any, error) {
			return c.GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Name: nul})
		}), codes.InvalidArgument, "name"},
		{"list workflows: negative page size", unary(func(ctx context.Context) (any, error) {
			return c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{PageSize: -1 << 30})
		}), codes.InvalidArgument, "page_size"},
		// Recovery and alerts
		{"retry: no step", unary(func(ctx context.Context) (any, error) {
			return sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "real"})
		}), codes.InvalidArgument, "step"},
		{"retry: negative delay", unary(func(ctx context.Context) (any, error) {
			return sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "real", Step: "x", Attempt: 1, Fence: fence, Delay: &durationpb.Duration{Seconds: -5}})
		}), codes.InvalidArgument, "delay"},
		{"retry: fence of a foreign key", unary(func(ctx context.Context) (any, error) {
			return sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "real", Step: "x", Attempt: 1, Fence: &reevev1.Fence{ElectionKey: "/reeve/tasks/default/real", Revision: 1, SupervisorId: "s"}})
		}), codes.InvalidArgument, "fence.election_key"},
		{"retry: forged fence", unary(func(ctx context.Context) (any, error) {
			return sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "real", Step: "x", Attempt: 1, Fence: fence})
		}), codes.FailedPrecondition, ""},
		{"compensate: fence without attempt", unary(func(ctx context.Context) (any, error) {
			return sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "real", Step: "x", Fence: fence})
		}), codes.InvalidArgument, "attempt"},
		{"fail: negative attempt", unary(func(ctx context.Context) (any, error) {
			return sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "real", Attempt: -3})
		}), codes.InvalidArgument, "attempt"},
		{"fail: supervisor id with slash", unary(func(ctx context.Context) (any, error) {
			return sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "real", Step: "x", Attempt: 1, Fence: &reevev1.Fence{ElectionKey: fence.ElectionKey, Revision: 1, SupervisorId: "a/b"}})
		}), codes.InvalidArgument, "fence.supervisor_id"},
		{"list alerts: bad namespace", unary(func(ctx context.Context) (any, error) {
			return sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: traversal})
		}), codes.InvalidArgument, "namespace"},
		{"watch alerts: bad namespace", func(ctx context.Context) error {
			st, err := sup.WatchAlerts(ctx, &reevev1.WatchAlertsRequest{Namespace: emoji})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, codes.InvalidArgument, "namespace"},
		{"ack alert: id over 256", unary(func(ctx context.Context) (any, error) {
			return sup.AckAlert(ctx, &reevev1.AckAlertRequest{AlertId: strings.Repeat("a", 300)})
		}), codes.InvalidArgument, "alert_id"},
		{"ack alert: unknown id", unary(func(ctx context.Context) (any, error) {
			return sup.AckAlert(ctx, &reevev1.AckAlertRequest{AlertId: "../x"})
		}), codes.NotFound, ""},
		// Agent stream registration
		{"connect: no agent id", func(context.Context) error {
			_, err := testenv.TryConnectRaw(t, s.Addr, &reevev1.Register{StepTypes: []string{"t"}, MaxConcurrentSteps: 1})
			return err
		}, codes.InvalidArgument, "agent_id"},
		{"connect: step type with NUL", func(context.Context) error {
			_, err := testenv.TryConnectRaw(t, s.Addr, register("a1", 1, "t", nul))
			return err
		}, codes.InvalidArgument, "step_types[1]"},
		{"connect: capacity 0", func(context.Context) error {
			_, err := testenv.TryConnectRaw(t, s.Addr, register("a1", 0, "t"))
			return err
		}, codes.InvalidArgument, "max_concurrent_steps"},
		{"connect: capacity over 10000", func(context.Context) error {
			_, err := testenv.TryConnectRaw(t, s.Addr, register("a1", 1<<30, "t"))
			return err
		}, codes.InvalidArgument, "max_concurrent_steps"},
		{"connect: duplicate step types", func(context.Context) error {
			_, err := testenv.TryConnectRaw(t, s.Addr, register("a1", 1, "t", "t"))
			return err
		}, codes.InvalidArgument, "step_types[1]"},
		{"connect: first message not register", func(ctx context.Context) error {
			st, err := reevev1.NewAgentServiceClient(testenv.Dial(t, s.Addr)).Connect(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: &reevev1.StepRef{TaskId: "real", Step: "x", Attempt: 1}}}})
			_, err = st.Recv()
			return err
		}, codes.InvalidArgument, "register"},
		{"connect: empty first message", func(ctx context.Context) error {
			st, err := reevev1.NewAgentServiceClient(testenv.Dial(t, s.Addr)).Connect(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&reevev1.ConnectRequest{})
			_, err = st.Recv()
			return err
		}, codes.InvalidArgument, "register"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			before := testenv.DataKeys(t, env.Etcd.Client())
			err := tc.call(ctx)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Fatalf("got %v, want %v naming %q", err, tc.code, tc.field)
			}
			if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
				t.Fatalf("etcd data changed from %v to %v: the refused call wrote something", before, after)
			}
		})
	}
}

// TestHostileResultsAreRefusedAndChangeNothing sends malformed, oversized
// and forged results on a registered agent stream: each gets a refusing ack
// and the task is unchanged.
func TestHostileResultsAreRefusedAndChangeNothing(t *testing.T) {
	env, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("holder", 1, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "real", Workflow: inline(step("x", "t"))})
	as := agent.NextAssignment(wait)
	ref := as.GetRef()
	with := func(f func(r *reevev1.StepRef)) *reevev1.StepRef {
		r := &reevev1.StepRef{Namespace: ref.GetNamespace(), TaskId: ref.GetTaskId(), Step: ref.GetStep(), Attempt: ref.GetAttempt()}
		f(r)
		return r
	}
	cases := []struct {
		name string
		res  *reevev1.StepResult
		code codes.Code
		msg  string
	}{
		{"no ref", &reevev1.StepResult{}, codes.InvalidArgument, "ref"},
		{"attempt 0", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Attempt = 0 })}, codes.InvalidArgument, "ref.attempt"},
		{"negative attempt", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Attempt = -1 })}, codes.InvalidArgument, "ref.attempt"},
		{"replayed with a future attempt", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Attempt = 2 })}, codes.FailedPrecondition, ""},
		{"traversal in task id", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.TaskId = "../real" })}, codes.InvalidArgument, "ref.task_id"},
		{"unknown step", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Step = "y" })}, codes.FailedPrecondition, ""},
		{"other namespace", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Namespace = "other" })}, codes.PermissionDenied, "ref.namespace"},
		// An output over 64 KiB from the holder is refused too, but fails the
		// step (output_too_large): TestOversizedResultIsRefusedOnItsOwn.
		{"output over 64 KiB, forged attempt", &reevev1.StepResult{Ref: with(func(r *reevev1.StepRef) { r.Attempt = 2 }), Outcome: &reevev1.StepResult_Output{Output: structpb.NewStringValue(strings.Repeat("o", 70<<10))}}, codes.FailedPrecondition, ""},
		{"NaN output", &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Output{Output: structpb.NewNumberValue(math.Inf(1))}}, codes.InvalidArgument, "output"},
		{"error message over 4 KiB", &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Message: strings.Repeat("e", 5000)}}}, codes.InvalidArgument, "error.message"},
	}
	before := testenv.DataKeys(t, env.Etcd.Client())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: tc.res}})
			ack := agent.NextResultAck(wait)
			if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != tc.code || !strings.Contains(ack.GetStatus().GetMessage(), tc.msg) {
				t.Fatalf("ack %v, want refused with %v naming %q", ack, tc.code, tc.msg)
			}
		})
	}
	if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatalf("refused results changed etcd: %v -> %v", before, after)
	}
	// The genuine result is still accepted afterwards.
	if ack := agent.Succeed(ref, map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("genuine result refused: %v", ack)
	}
}

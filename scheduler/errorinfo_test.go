package scheduler_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// errCase is one refusal a client can get, and what its status must say:
// the code, the ErrorInfo reason (domain reeve.dev) and metadata, and for
// INVALID_ARGUMENT the field of the BadRequest violation.
type errCase struct {
	name   string
	call   func(ctx context.Context) error
	code   codes.Code
	reason string
	meta   map[string]string
	field  string
}

func checkErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := tc.call(ctx)
		cancel()
		st := status.Convert(err)
		info := errorInfo(st)
		if st.Code() != tc.code || info.GetReason() != tc.reason || info.GetDomain() != scheduler.ErrorDomain {
			t.Errorf("%s: %v (ErrorInfo %v), want %v reason %s", tc.name, err, info, tc.code, tc.reason)
			continue
		}
		for k, v := range tc.meta {
			if got := info.GetMetadata()[k]; got != v {
				t.Errorf("%s: metadata %s = %q, want %q (all: %v)", tc.name, k, got, v, info.GetMetadata())
			}
		}
		if got := fieldOf(st); got != tc.field {
			t.Errorf("%s: field violation %q, want %q", tc.name, got, tc.field)
		}
	}
}

// Every refusal the scheduler answers a client, operator or supervisor
// with carries a stable ErrorInfo reason and what the request named
// (namespace, task, step, attempt); INVALID_ARGUMENT names the field in a
// BadRequest. The situations are set up for real: tasks pending, expired,
// canceled and failed; a fence that holds and one that does not.
func TestErrorsCarryReasons(t *testing.T) {
	env := testenv.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	s := env.StartScheduler("", scheduler.WithClock(clock))
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	el, err := env.Etcd.Client().Put(ctx, "/reeve/supervisor/election/errs", "sup")
	if err != nil {
		t.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/errs", Revision: el.Header.Revision, SupervisorId: "sup"}
	deposed := &reevev1.Fence{ElectionKey: fence.GetElectionKey(), Revision: fence.GetRevision() + 1000, SupervisorId: "sup"}

	// Steps of a type no agent serves stay queued; one queued for longer
	// than its schedule-to-start timeout has expired.
	queued := func(id string, scheduleToStart time.Duration) int32 {
		t.Helper()
		a := step("a", "nobody")
		a.ScheduleToStartTimeout = durationpb.New(scheduleToStart)
		return stepOf(submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(a)}), "a").GetAttempt()
	}
	pendingAttempt := queued("t-pending", time.Hour)
	expiredAttempt := queued("t-expired", time.Second)
	queued("t-canceled", time.Hour)
	queued("t-failed", time.Hour)
	queued("t-dup", time.Hour)
	clock.Advance(2 * time.Second)
	if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-canceled"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "t-failed"}); err != nil {
		t.Fatal(err)
	}
	att := func(n int32) string { return strconv.Itoa(int(n)) }

	checkErrCases(t, []errCase{
		{"get without task id", func(ctx context.Context) error {
			_, err := c.GetTask(ctx, &reevev1.GetTaskRequest{})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, map[string]string{"namespace": "default"}, "task_id"},
		{"negative page size", func(ctx context.Context) error {
			_, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{PageSize: -1})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, nil, "page_size"},
		{"forged page token", func(ctx context.Context) error {
			_, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{PageToken: "dGFzay0x"})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, nil, "page_token"},
		{"cancel reason too long", func(ctx context.Context) error {
			_, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "t-pending", Reason: strings.Repeat("r", 2000)})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, map[string]string{"task_id": "t-pending"}, "reason"},
		{"bad request id", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-failed", Step: "a", RequestId: "not an id"})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, map[string]string{"task_id": "t-failed", "step": "a"}, "request_id"},
		{"invalid workflow", func(ctx context.Context) error {
			_, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "w", Steps: []*reevev1.StepSpec{step("a", "t", "ghost")}}})
			return err
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, nil, "workflow.steps[0].depends_on[0]"},
		{"decoding fails", func(ctx context.Context) error {
			// Field 2 (task_id) holding invalid UTF-8.
			req := []byte{0x12, 0x02, 0xff, 0xfe}
			return testenv.Dial(t, s.Addr).Invoke(ctx, "/reeve.v1.SchedulerService/GetTask", &req, new([]byte), grpc.ForceCodec(rawCodec{}))
		}, codes.InvalidArgument, scheduler.ReasonMalformedRequest, nil, "request"},
		{"task not found", func(ctx context.Context) error {
			_, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "ghost"})
			return err
		}, codes.NotFound, scheduler.ReasonTaskNotFound, map[string]string{"namespace": "default", "task_id": "ghost"}, ""},
		{"watch of a task not found", func(ctx context.Context) error {
			st, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: "ghost"})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}, codes.NotFound, scheduler.ReasonTaskNotFound, map[string]string{"task_id": "ghost"}, ""},
		{"workflow not found", func(ctx context.Context) error {
			_, err := c.GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Name: "nope"})
			return err
		}, codes.NotFound, scheduler.ReasonWorkflowNotFound, map[string]string{"namespace": "default", "workflow": "nope"}, ""},
		{"alert not found", func(ctx context.Context) error {
			_, err := sup.AckAlert(ctx, &reevev1.AckAlertRequest{AlertId: "nope"})
			return err
		}, codes.NotFound, scheduler.ReasonAlertNotFound, map[string]string{"alert_id": "nope"}, ""},
		{"task exists with another request", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "t-dup", Workflow: inline(step("b", "nobody")), Input: structpb.NewStringValue("x")})
			return err
		}, codes.AlreadyExists, scheduler.ReasonTaskAlreadyExists, map[string]string{"task_id": "t-dup"}, ""},
		{"retry of an unknown step", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-pending", Step: "zzz"})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonStepNotFound, map[string]string{"task_id": "t-pending", "step": "zzz"}, ""},
		{"retry of a pending task", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-pending", Step: "a"})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonWrongState, map[string]string{"task_id": "t-pending", "step": "a"}, ""},
		{"compensate a canceled task", func(ctx context.Context) error {
			_, err := sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "t-canceled"})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonTaskTerminal, map[string]string{"task_id": "t-canceled"}, ""},
		{"retry of a step that did not fail", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-failed", Step: "a"})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonStepNotFailed, map[string]string{"task_id": "t-failed", "step": "a"}, ""},
		{"supervisor retry before expiry", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-pending", Step: "a", Attempt: pendingAttempt, Fence: fence})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonNotExpired, map[string]string{"task_id": "t-pending", "step": "a", "attempt": att(pendingAttempt)}, ""},
		{"supervisor retry of another attempt", func(ctx context.Context) error {
			_, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "t-expired", Step: "a", Attempt: expiredAttempt + 5, Fence: fence})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonStaleAttempt, map[string]string{"task_id": "t-expired", "attempt": att(expiredAttempt + 5)}, ""},
		{"deposed supervisor", func(ctx context.Context) error {
			_, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "t-expired", Step: "a", Attempt: expiredAttempt, Fence: deposed})
			return err
		}, codes.FailedPrecondition, scheduler.ReasonFenced, map[string]string{"task_id": "t-expired", "step": "a", "attempt": att(expiredAttempt)}, ""},
		{"recover steps of a deposed supervisor", func(ctx context.Context) error {
			resp, err := sup.RecoverSteps(ctx, &reevev1.RecoverStepsRequest{Fence: deposed, Decisions: []*reevev1.RecoveryDecision{
				{TaskId: "t-expired", Step: "a", Attempt: expiredAttempt, Action: reevev1.RecoveryAction_RECOVERY_ACTION_FAIL},
			}})
			if err != nil {
				return err
			}
			return status.FromProto(resp.GetOutcomes()[0].GetStatus()).Err()
		}, codes.FailedPrecondition, scheduler.ReasonFenced, map[string]string{"task_id": "t-expired", "step": "a", "attempt": att(expiredAttempt)}, ""},
		{"recover steps: a malformed decision", func(ctx context.Context) error {
			resp, err := sup.RecoverSteps(ctx, &reevev1.RecoverStepsRequest{Fence: fence, Decisions: []*reevev1.RecoveryDecision{
				{TaskId: "t-expired", Step: "a", Action: reevev1.RecoveryAction_RECOVERY_ACTION_FAIL},
			}})
			if err != nil {
				return err
			}
			return status.FromProto(resp.GetOutcomes()[0].GetStatus()).Err()
		}, codes.InvalidArgument, scheduler.ReasonInvalidField, map[string]string{"task_id": "t-expired"}, "decisions[0].attempt"},
	})

	// Admission limits, each on a scheduler of its own.
	rated := env.StartScheduler("", scheduler.WithSubmitRate(0.001, 1)).Client(t)
	limited := env.StartScheduler("", scheduler.WithMaxActiveTasks(1)).Client(t)
	submit(t, rated, &reevev1.SubmitTaskRequest{Namespace: "rated", Workflow: inline(step("a", "nobody"))})
	submit(t, limited, &reevev1.SubmitTaskRequest{Namespace: "limited", Workflow: inline(step("a", "nobody"))})
	checkErrCases(t, []errCase{
		{"over the submission rate", func(ctx context.Context) error {
			_, err := rated.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "rated", Workflow: inline(step("a", "nobody"))})
			return err
		}, codes.ResourceExhausted, scheduler.ReasonRateLimited, map[string]string{"namespace": "rated"}, ""},
		{"over the active tasks", func(ctx context.Context) error {
			_, err := limited.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "limited", Workflow: inline(step("a", "nobody"))})
			return err
		}, codes.ResourceExhausted, scheduler.ReasonActiveTaskLimit, map[string]string{"namespace": "limited"}, ""},
	})
}

// A retry of an operator action after a lost answer returns the task
// instead of a refusal (AIP-155): CancelTask on a canceled task, and
// FailTask or CompensateTask with a request_id already applied. Without the
// request_id the same call is refused.
func TestOperatorActionsAreIdempotent(t *testing.T) {
	_, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "cancel-twice", Workflow: inline(step("a", "nobody"))})
	for i := range 2 {
		resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "cancel-twice"})
		if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("cancel %d: %v, %v; want the CANCELED task", i, resp.GetTask().GetState(), err)
		}
	}

	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "ops", Workflow: inline(step("a", "nobody"))})
	fail := func(rid string) (*reevev1.Task, error) {
		resp, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "ops", RequestId: rid})
		return resp.GetTask(), err
	}
	first, err := fail("req-1")
	if err != nil || first.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("fail: %v, %v", first.GetState(), err)
	}
	again, err := fail("req-1")
	if err != nil || again.GetState() != reevev1.TaskState_TASK_STATE_FAILED || len(again.GetHistory()) != len(first.GetHistory()) {
		t.Fatalf("fail again with the same request id: %v, %v; want the task unchanged", again, err)
	}
	if _, err := fail("req-2"); reasonOf(status.Convert(err)) != scheduler.ReasonTaskTerminal {
		t.Fatalf("fail with another request id: %v, want TASK_TERMINAL", err)
	}
	marked := 0
	for _, e := range again.GetHistory() {
		if e.GetRequestId() == "req-1" {
			marked++
		}
	}
	if marked == 0 {
		t.Fatalf("no history event records request id req-1: %v", again.GetHistory())
	}
}

// A refused result's ResultAck status carries the reason and the execution
// it names, like every API error: STALE_ATTEMPT for another attempt,
// INVALID_FIELD with the field for a malformed result.
func TestResultAckCarriesReasons(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 1, "work"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t-run", Workflow: inline(step("x", "work"))})
	ref := a.NextAssignment(wait).GetRef()
	other := &reevev1.StepRef{Namespace: ref.GetNamespace(), TaskId: ref.GetTaskId(), Step: ref.GetStep(), Attempt: ref.GetAttempt() + 5}
	ack := a.Succeed(other, map[string]any{"ok": true})
	st := status.FromProto(ack.GetStatus())
	info := errorInfo(st)
	if ack.GetAccepted() || st.Code() != codes.FailedPrecondition || info.GetReason() != scheduler.ReasonStaleAttempt ||
		info.GetMetadata()["task_id"] != "t-run" || info.GetMetadata()["attempt"] != strconv.Itoa(int(other.GetAttempt())) {
		t.Fatalf("result for another attempt: %v, want FAILED_PRECONDITION STALE_ATTEMPT naming t-run attempt %d", ack, other.GetAttempt())
	}
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{}}})
	st = status.FromProto(a.NextResultAck(wait).GetStatus())
	if st.Code() != codes.InvalidArgument || reasonOf(st) != scheduler.ReasonInvalidField || fieldOf(st) != "result.ref" {
		t.Fatalf("result without a ref: %v (%v), want INVALID_FIELD naming result.ref", st, st.Details())
	}
}

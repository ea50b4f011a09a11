package scheduler_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

func TestSubmitIsIdempotentOnTaskID(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req := &reevev1.SubmitTaskRequest{TaskId: "same", Workflow: inline(step("x", "t")), Input: testenv.Value(t, map[string]any{"n": 1})}
	first, err := c.SubmitTask(ctx, req)
	if err != nil || !first.GetCreated() {
		t.Fatalf("first submit: %v created=%v", err, first.GetCreated())
	}
	again, err := c.SubmitTask(ctx, req)
	if err != nil || again.GetCreated() || again.GetTask().GetCreateTime().AsTime() != first.GetTask().GetCreateTime().AsTime() {
		t.Fatalf("resubmit: err %v created %v, want the existing task", err, again.GetCreated())
	}
	req.Input = testenv.Value(t, map[string]any{"n": 2})
	_, err = c.SubmitTask(ctx, req)
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "task_id") {
		t.Fatalf("different request with the same id: %v, want AlreadyExists naming task_id", err)
	}
}

func TestSubmitByWorkflowNameUsesLatestOrPinnedVersion(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reg := func(typ string) *reevev1.RegisterWorkflowResponse {
		resp, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{step("x", typ)}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	v1 := reg("a")
	if same := reg("a"); same.GetCreated() || same.GetWorkflow().GetVersion() != 1 {
		t.Fatalf("re-registering the same definition: created=%v version %d, want version 1 unchanged", same.GetCreated(), same.GetWorkflow().GetVersion())
	}
	v2 := reg("b")
	if v1.GetWorkflow().GetVersion() != 1 || v2.GetWorkflow().GetVersion() != 2 {
		t.Fatalf("versions %d, %d; want 1, 2", v1.GetWorkflow().GetVersion(), v2.GetWorkflow().GetVersion())
	}
	latest := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "orders"}}})
	pinned := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "orders", Version: 1}}})
	if latest.GetWorkflow().GetVersion() != 2 || latest.GetSteps()[0].GetType() != "b" || pinned.GetWorkflow().GetVersion() != 1 {
		t.Fatalf("latest ran v%d (%s), pinned ran v%d", latest.GetWorkflow().GetVersion(), latest.GetSteps()[0].GetType(), pinned.GetWorkflow().GetVersion())
	}
	if latest.GetId() == "" || latest.GetId() == pinned.GetId() {
		t.Fatalf("generated ids %q and %q, want distinct", latest.GetId(), pinned.GetId())
	}
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "nope"}}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown workflow: %v, want NotFound", err)
	}
	list, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{})
	if err != nil || len(list.GetWorkflows()) != 1 || list.GetWorkflows()[0].GetVersion() != 2 {
		t.Fatalf("list workflows: %v %v, want orders v2 only", list, err)
	}
}

func TestInvalidRequestsAreRefusedAndStoreNothing(t *testing.T) {
	env, _, c := newEnv(t)
	etcd := env.Etcd.Client()
	long := strings.Repeat("x", 200)
	cycle := inline(step("a", "t", "b"), step("b", "t", "a"))
	tooShort := step("a", "t")
	tooShort.Timeout = durationpb.New(time.Millisecond)
	cases := []struct {
		name  string
		call  func(context.Context) error
		field string
	}{
		{"no workflow", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{})
			return err
		}, "workflow"},
		{"bad namespace", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "Bad NS", Workflow: inline(step("a", "t"))})
			return err
		}, "namespace"},
		{"task id with slash", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "a/b", Workflow: inline(step("a", "t"))})
			return err
		}, "task_id"},
		{"cycle", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: cycle})
			return err
		}, "inline_workflow.steps"},
		{"unknown dependency", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t", "ghost"))})
			return err
		}, "inline_workflow.steps[0].dependsOn[0]"},
		{"duplicate step", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t"), step("a", "t"))})
			return err
		}, "inline_workflow.steps[1].name"},
		{"timeout too short", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(tooShort)})
			return err
		}, "inline_workflow.steps[0].timeout"},
		{"oversized input", func(ctx context.Context) error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "t")), Input: testenv.Value(t, strings.Repeat("x", 70<<10))})
			return err
		}, "input"},
		{"workflow without name", func(ctx context.Context) error {
			_, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Steps: []*reevev1.StepSpec{step("a", "t")}}})
			return err
		}, "workflow.name"},
		{"long step type", func(ctx context.Context) error {
			_, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "w", Steps: []*reevev1.StepSpec{step("a", long)}}})
			return err
		}, "workflow.steps[0].type"},
		{"get without id", func(ctx context.Context) error {
			_, err := c.GetTask(ctx, &reevev1.GetTaskRequest{})
			return err
		}, "task_id"},
		{"negative page size", func(ctx context.Context) error {
			_, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: -5})
			return err
		}, "page_size"},
		{"cancel reason too long", func(ctx context.Context) error {
			_, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "x", Reason: strings.Repeat("r", 2000)})
			return err
		}, "reason"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			before := testenv.DataKeys(t, etcd)
			err := tc.call(ctx)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Fatalf("got %v, want InvalidArgument naming %q", err, tc.field)
			}
			if after := testenv.DataKeys(t, etcd); !maps.Equal(before, after) {
				t.Fatalf("etcd data changed from %v to %v: the refused request wrote something", before, after)
			}
		})
	}
}

func TestListTasksFiltersByStateAndPages(t *testing.T) {
	_, s, c := newEnv(t)
	for _, id := range []string{"l1", "l2", "l3"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("x", "t"))})
	}
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 1, "t"))
	as := agent.NextAssignment(wait)
	agent.Succeed(as.GetRef(), nil)
	done := as.GetRef().GetTaskId()
	testenv.WaitTask(t, c, "default", done, wait)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	succeeded, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{State: reevev1.TaskState_TASK_STATE_SUCCEEDED})
	if err != nil || len(succeeded.GetTasks()) != 1 || succeeded.GetTasks()[0].GetId() != done {
		t.Fatalf("succeeded tasks %v %v, want only %s", succeeded, err, done)
	}
	var ids []string
	token := ""
	for range 5 {
		page, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page.GetTasks() {
			ids = append(ids, task.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "l3,l2,l1" {
		t.Fatalf("paged ids %v, want l3,l2,l1 (newest first)", ids)
	}
}

// Every queued step has a deadline by default: with no agent for its type,
// a step of a workflow that sets no schedule-to-start timeout is due for the
// supervisor one hour after it became ready, not never.
func TestQueuedStepHasAScheduleToStartDeadlineByDefault(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "nobody-serves-it", Workflow: inline(step("x", "unserved"))})
	if err != nil {
		t.Fatal(err)
	}
	task := resp.GetTask()
	if got := task.GetWorkflow().GetDefaultScheduleToStartTimeout().AsDuration(); got != time.Hour {
		t.Fatalf("workflow snapshot's default schedule-to-start %v, want 1h", got)
	}
	x := task.GetSteps()[0]
	if got := x.GetScheduleToStartDeadline().AsTime().Sub(x.GetReadyTime().AsTime()); got != time.Hour {
		t.Fatalf("queued step's schedule-to-start deadline is %v after it became ready, want 1h", got)
	}
}

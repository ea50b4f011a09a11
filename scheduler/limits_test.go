package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

func TestSubmitRateIsLimitedPerClient(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithSubmitRate(0.001, 2)) // a burst of 2, then one per 1000s
	c := s.Client(t)
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("x", "t"))})
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("x", "t"))})

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	before := testenv.DataKeys(t, env.Etcd.Client())
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("x", "t"))})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "submit rate") {
		t.Fatalf("third submission: %v, want RESOURCE_EXHAUSTED about the submit rate", err)
	}
	if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatalf("refused submission changed etcd")
	}
	// Reads are not limited.
	if _, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{}); err != nil {
		t.Fatalf("list after the limit: %v", err)
	}
}

func TestActiveTasksPerNamespaceAreCapped(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithMaxActiveTasks(2))
	c := s.Client(t)
	submit(t, c, &reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "a1", Workflow: inline(step("x", "t"))})
	submit(t, c, &reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "a2", Workflow: inline(step("x", "t"))})
	// Another namespace has its own budget.
	submit(t, c, &reevev1.SubmitTaskRequest{Namespace: "b", TaskId: "b1", Workflow: inline(step("x", "t"))})

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	before := testenv.DataKeys(t, env.Etcd.Client())
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "a3", Workflow: inline(step("x", "t"))})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), `"a" has 2 active tasks`) {
		t.Fatalf("third active task: %v, want RESOURCE_EXHAUSTED naming the namespace", err)
	}
	if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatalf("refused submission changed etcd")
	}

	// An idempotent resubmission of an existing task still gets it back.
	again, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "a2", Workflow: inline(step("x", "t"))})
	if err != nil || again.GetCreated() || again.GetTask().GetId() != "a2" {
		t.Fatalf("resubmission at the limit: %v, %v; want the existing task", again, err)
	}

	// Once a task ends, a new one is admitted (after the count's refresh).
	if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: "a", TaskId: "a1"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "a3", Workflow: inline(step("x", "t"))})
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || ctx.Err() != nil {
			t.Fatalf("submission after a task ended: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the count refreshes once per second
	}
}

// Defect 1: a workflow with 64 parallel steps used to register, and its
// tasks then failed to be created with UNAVAILABLE (130 operations, over
// etcd's 128 per transaction). It is refused up front, naming the field and
// the limit, registered or inline, and nothing is written.
func TestWorkflowOverTheTxnOpLimitIsRefused(t *testing.T) {
	env := testenv.New(t)
	c := env.StartScheduler("").Client(t)
	var steps []*reevev1.StepSpec
	for i := range 64 {
		steps = append(steps, step(fmt.Sprintf("s%02d", i), "t"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	before := testenv.DataKeys(t, env.Etcd.Client())
	_, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "wide", Steps: steps}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "workflow.steps") || !strings.Contains(status.Convert(err).Message(), "128") {
		t.Fatalf("register 64 parallel steps: %v, want INVALID_ARGUMENT naming workflow.steps and the limit", err)
	}
	_, err = c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(steps...)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "inline_workflow.steps") {
		t.Fatalf("submit 64 parallel steps inline: %v, want INVALID_ARGUMENT naming inline_workflow.steps", err)
	}
	if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatalf("refused workflow changed etcd")
	}
	// 58 parallel steps fit (2·58 + 12 = 128), and so does the whole task's life.
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(steps[:58]...)})
}

package scheduler_test

import (
	"context"
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

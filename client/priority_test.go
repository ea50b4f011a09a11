package client_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// WithPriority and WithFairnessKey reach the task (issue 36); a priority
// out of range is refused INVALID_ARGUMENT.
func TestSubmitWithPriorityAndFairnessKey(t *testing.T) {
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"work": func(context.Context, *agentsdk.Step) (any, error) { return nil, nil },
	})
	e.register(t, &reevev1.Workflow{Name: "work", Steps: []*reevev1.StepSpec{step("work", "work")}})
	run, err := e.c.Submit(ctx(t), "work", nil, client.WithPriority(1), client.WithFairnessKey("tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	task, err := run.Wait(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if task.GetPriority() != 1 || task.GetFairnessKey() != "tenant-a" {
		t.Fatalf("task priority %d key %q, want 1 and tenant-a", task.GetPriority(), task.GetFairnessKey())
	}
	if _, err := e.c.Submit(ctx(t), "work", nil, client.WithPriority(9)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("priority 9: %v, want INVALID_ARGUMENT", err)
	}
}

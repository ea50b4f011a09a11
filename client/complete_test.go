package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func approval() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "approval", Steps: []*reevev1.StepSpec{
		{Name: "approve", WaitFor: "external", Timeout: durationpb.New(time.Hour)},
		{Name: "ship", Type: "ship", DependsOn: []string{"approve"}, Timeout: durationpb.New(10 * time.Second)},
	}}
}

// waitingStep polls the run until its approve step waits.
func waitingStep(t *testing.T, ctx context.Context, r *client.Run) {
	t.Helper()
	for {
		task, err := r.Task(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if task.GetSteps()[0].GetState() == reevev1.StepState_STEP_STATE_WAITING {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the step never waited")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestRunCompleteStepAndByToken(t *testing.T) {
	e := newEnv(t, map[string]agentsdk.HandlerFunc{"ship": func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var v struct{ By string }
		err := s.DependencyOutput("approve", &v)
		return v.By, err
	}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	r, err := e.c.Submit(ctx, "approval", nil, client.WithInlineWorkflow(approval()))
	if err != nil {
		t.Fatal(err)
	}
	waitingStep(t, ctx, r)
	if steps, next, err := e.c.WaitingSteps(ctx, ""); err != nil || len(steps) != 1 || steps[0].GetRef().GetTaskId() != r.ID() || next != "" {
		t.Fatalf("waiting steps %v, %q, %v", steps, next, err)
	}
	if _, err := r.CompleteStep(ctx, "approve", map[string]string{"by": "ann"}); err != nil {
		t.Fatal(err)
	}
	if resp, err := r.CompleteStep(ctx, "approve", map[string]string{"by": "ann"}); err != nil || !resp.GetRepeated() {
		t.Fatalf("the same completion again: %v, %v", resp, err)
	}
	task, err := r.Wait(ctx)
	if err != nil || task.GetSteps()[1].GetOutput().GetStringValue() != "ann" {
		t.Fatalf("task %v, %v: want ship's output ann", task, err)
	}

	r2, err := e.c.Submit(ctx, "approval", nil, client.WithInlineWorkflow(approval()))
	if err != nil {
		t.Fatal(err)
	}
	waitingStep(t, ctx, r2)
	tok, err := r2.CompletionToken(ctx, "approve")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.FailByToken(ctx, tok, "rejected", "no"); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.CompleteByToken(ctx, tok, "yes after all")
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another completion: %v, want FAILED_PRECONDITION", err)
	}
	final, err := r2.Task(ctx)
	if err != nil || final.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v, %v; want FAILED", final.GetState(), err)
	}
}

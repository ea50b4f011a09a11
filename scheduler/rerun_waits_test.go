package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A rerun of a task that had a start time, a task timeout and a completed
// wait is a new task: it starts now, has its own deadline (the task
// timeout it was submitted with, from its own creation), and its wait
// waits again with a new token.
func TestRerunOfATaskThatWaited(t *testing.T) {
	_, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "inv.release", "ship"))
	req := &reevev1.SubmitTaskRequest{TaskId: "old", Workflow: approvalFlow(time.Hour, nil), TaskTimeout: durationpb.New(time.Hour),
		StartTime: timestamppb.New(time.Now().Add(time.Hour))}
	submit(t, c, req)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// Fail it before it starts, so that it can be rerun.
	if _, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "old", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.RerunTask(ctx, &reevev1.RerunTaskRequest{TaskId: "old", FromStep: "reserve", NewTaskId: "new"})
	if err != nil {
		t.Fatal(err)
	}
	nt := resp.GetTask()
	if nt.GetStartTime() != nil {
		t.Fatalf("rerun start time %v, want none (it starts now)", nt.GetStartTime())
	}
	if nt.GetDeadline() == nil || nt.GetDeadline().AsTime().Sub(nt.GetCreateTime().AsTime()) != time.Hour {
		t.Fatalf("rerun deadline %v created %v, want the task timeout it was submitted with from its creation", nt.GetDeadline(), nt.GetCreateTime())
	}
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "new", waitingAt(1))
	if tok := tokenOf(t, c, "", "new", "approve"); tok == "" {
		t.Fatal("no token")
	}
}

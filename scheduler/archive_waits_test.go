package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// A task that ended after a completion from outside moves to the archive;
// the completion sent again, by token and by name, is answered from there
// as a repeat, another one is refused; the task's new fields (deadline,
// priority, fairness key) and its steps' (completion, wait) read back as
// they were.
func TestCompletionRepeatedAfterTheArchive(t *testing.T) {
	for _, kind := range archiveBackends {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t)
			a := openArchive(t, archiveDSN(t, kind))
			s := env.StartScheduler("", archiving(a)...)
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
			submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "done", Workflow: approvalFlow(time.Hour, nil),
				TaskTimeout: durationpb.New(time.Hour), Priority: 1, FairnessKey: "tenant-a"})
			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
			pollTask(t, c, "", "done", waitingAt(1))
			byToken := &reevev1.CompleteStepRequest{Token: tokenOf(t, c, "", "done", "approve"), Outcome: output(map[string]any{"ok": true})}
			byName := &reevev1.CompleteStepRequest{TaskId: "done", Step: "approve", Outcome: output(map[string]any{"ok": true})}
			if _, err := completeStep(c, byToken); err != nil {
				t.Fatal(err)
			}
			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
			ended := testenv.WaitTask(t, c, "default", "done", wait)
			waitArchived(t, env, a, "done")

			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "done"})
			if err != nil || !got.GetArchived() || !proto.Equal(got.GetTask(), ended) {
				t.Fatalf("archived task %v, %v; want it as it ended", got, err)
			}
			at := got.GetTask()
			ap := stepOf(at, "approve")
			if at.GetDeadline() == nil || at.GetPriority() != 1 || at.GetFairnessKey() != "tenant-a" ||
				len(ap.GetCompletionDigest()) == 0 || ap.GetCompletionAttempt() != 1 || ap.GetCompletionState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
				t.Fatalf("archived task lost fields: deadline %v priority %d fairness %q approve %v", at.GetDeadline(), at.GetPriority(), at.GetFairnessKey(), ap)
			}
			for what, req := range map[string]*reevev1.CompleteStepRequest{"by token": byToken, "by name": byName} {
				resp, err := completeStep(c, req)
				if err != nil || !resp.GetRepeated() || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED || resp.GetRef().GetAttempt() != 1 {
					t.Fatalf("%s, once archived: %v, %v; want a repeat", what, resp, err)
				}
				other := proto.Clone(req).(*reevev1.CompleteStepRequest)
				other.Outcome = output("other")
				_, err = completeStep(c, other)
				wantRefusal(t, what+", another completion once archived", err, codes.FailedPrecondition, scheduler.ReasonCompletedOtherwise)
			}
		})
	}
}

package cluster_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
)

// Steps completed from outside in the production configuration (issue 35):
// separate processes, 3 etcd members, 2 schedulers, a supervisor and an
// agent (the demo agent, unused: a wait needs none), all
// over mutual TLS with role checks. A client may not complete a waiting
// step by name, an approver may (the same completion again is answered as
// the first, through the other scheduler); a client holding the token may;
// an expired wait is failed by the supervisor and its token then completes
// nothing.
func TestCompletionsOverMutualTLS(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := clustertest.Start(ctx, t, cluster.Config{Dir: t.TempDir(), Reeve: reeve, Etcd: etcd, NoFsync: true, Secure: true,
		Supervisors: 1, SupervisorTick: 200 * time.Millisecond, Agents: 1, AgentArgs: func(int) []string { return []string{"--demo"} }})
	dial := func(id cluster.Identity, sched int) reevev1.SchedulerServiceClient {
		opts, err := c.DialOptions(id)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(c.SchedulerAddrs[sched], opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return reevev1.NewSchedulerServiceClient(cc)
	}
	client, approver, approver2 := dial(cluster.Client, 0), dial(cluster.Approver, 0), dial(cluster.Approver, 1)
	wf := func(timeout time.Duration) *reevev1.SubmitTaskRequest_InlineWorkflow {
		return &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "approval", Steps: []*reevev1.StepSpec{
			{Name: "approve", WaitFor: "external", Timeout: durationpb.New(timeout), RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 1}},
		}}}
	}
	for _, id := range []string{"by-name", "by-token"} {
		if _, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: wf(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "expires", Workflow: wf(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	waiting := func(id string) {
		t.Helper()
		for ctx.Err() == nil {
			resp, err := client.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetTask().GetSteps()[0].GetState() == reevev1.StepState_STEP_STATE_WAITING {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s never waited", id)
	}
	waiting("by-name")
	waiting("by-token")
	waiting("expires")
	ok := &reevev1.CompleteStepRequest_Output{Output: structpb.NewStringValue("approved")}
	byName := &reevev1.CompleteStepRequest{TaskId: "by-name", Step: "approve", Outcome: ok}
	if _, err := client.CompleteStep(ctx, byName); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client completes by name: %v, want PERMISSION_DENIED", err)
	}
	if _, err := client.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{TaskId: "by-token", Step: "approve"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client reads a token: %v, want PERMISSION_DENIED", err)
	}
	if resp, err := approver.CompleteStep(ctx, byName); err != nil || resp.GetRepeated() {
		t.Fatalf("an approver completes by name: %v, %v", resp, err)
	}
	if resp, err := approver2.CompleteStep(ctx, byName); err != nil || !resp.GetRepeated() {
		t.Fatalf("the same completion at the other scheduler: %v, %v; want it answered as the first", resp, err)
	}
	tok, err := approver.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{TaskId: "by-token", Step: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: tok.GetToken(), Outcome: ok}); err != nil {
		t.Fatalf("a client holding the token: %v", err)
	}
	// The expired wait: the supervisor fails it (one attempt, no
	// compensation), and its token completes nothing.
	expTok, err := approver.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{TaskId: "expires", Step: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"by-name", "by-token", "expires"} {
		want := reevev1.TaskState_TASK_STATE_SUCCEEDED
		if id == "expires" {
			want = reevev1.TaskState_TASK_STATE_FAILED
		}
		for {
			resp, err := client.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.GetTask().GetState(); st == want {
				break
			} else if ctx.Err() != nil {
				t.Fatalf("%s is %v, want %v", id, st, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := client.CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: expTok.GetToken(), Outcome: ok}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the expired wait's token: %v, want FAILED_PRECONDITION", err)
	}
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	clustertest.Verify(ctx, t, cli)
}

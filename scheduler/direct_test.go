package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// directSetup submits one task whose step x (type t, 10 s timeout) is held
// by agent "holder", which acknowledged it and then drained (a hung
// handler), connects agent "healthy" (room for one step) and moves the
// scheduler's clock past the step's complete-by. It returns the supervisor
// client, a fence that holds, the etcd client and both agents.
func directSetup(t *testing.T, id string) *direct {
	t.Helper()
	env := testenv.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	s := env.StartScheduler("", scheduler.WithClock(clock))
	c := s.Client(t)
	cli := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	el, err := cli.Put(ctx, "/reeve/supervisor/election/"+id, "sup")
	if err != nil {
		t.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/" + id, Revision: el.Header.Revision, SupervisorId: "sup"}

	holder := testenv.ConnectRaw(t, s.Addr, register("holder", 1, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(&reevev1.StepSpec{Name: "x", Type: "t", Timeout: durationpb.New(10 * time.Second),
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)}})})
	if a := holder.NextAssignment(wait); a.GetRef().GetAttempt() != 1 {
		t.Fatalf("holder got %v, want attempt 1", a.GetRef())
	}
	holder.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Drain{Drain: &reevev1.Drain{Reason: "hung"}}})
	healthy := testenv.ConnectRaw(t, s.Addr, register("healthy", 1, "t"))
	clock.Advance(11 * time.Second)
	return &direct{c: c, sup: reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr)), fence: fence, cli: cli, holder: holder, healthy: healthy}
}

type direct struct {
	c               reevev1.SchedulerServiceClient
	sup             reevev1.SupervisorServiceClient
	fence           *reevev1.Fence
	cli             *clientv3.Client
	holder, healthy *testenv.RawAgent
}

// version returns the task record's etcd version (puts since creation).
func version(t *testing.T, cli *clientv3.Client, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cli.Get(ctx, "/reeve/tasks/default/"+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get task %s: %v (%d keys)", id, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Version
}

func retryDecision(id string, delay time.Duration) *reevev1.RecoverStepsRequest {
	return &reevev1.RecoverStepsRequest{Decisions: []*reevev1.RecoveryDecision{{TaskId: id, Step: "x", Attempt: 1,
		Action: reevev1.RecoveryAction_RECOVERY_ACTION_RETRY, Delay: durationpb.New(delay)}}}
}

// A RETRY decision due at once, with an agent on this scheduler that has
// room, is the recovery and the dispatch of the next attempt in one write:
// the task record is written once, no ready key is ever written, and the
// history reads as the two writes would (retry scheduled, then dispatched).
// A decision whose fence does not hold changes nothing and holds no
// capacity back; the old holder's late result is refused.
func TestRecoverStepsDispatchesDirectly(t *testing.T) {
	d := directSetup(t, "d1")
	sup, fence, cli, holder, healthy := d.sup, d.fence, d.cli, d.holder, d.healthy
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v0 := version(t, cli, "d1")

	deposed := retryDecision("d1", 0)
	deposed.Fence = &reevev1.Fence{ElectionKey: fence.GetElectionKey(), Revision: fence.GetRevision() + 1000, SupervisorId: "sup"}
	resp, err := sup.RecoverSteps(ctx, deposed)
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.GetOutcomes()[0]; o.GetApplied() || status.FromProto(o.GetStatus()).Code() != codes.FailedPrecondition || reasonOf(status.FromProto(o.GetStatus())) != scheduler.ReasonFenced {
		t.Fatalf("deposed decision: %v, want FAILED_PRECONDITION", o)
	}
	if v := version(t, cli, "d1"); v != v0 {
		t.Fatalf("a deposed decision wrote the task (version %d -> %d)", v0, v)
	}
	healthy.Quiet(300 * time.Millisecond)

	req := retryDecision("d1", 0)
	req.Fence = fence
	resp, err = sup.RecoverSteps(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.GetOutcomes()[0]; !o.GetApplied() {
		t.Fatalf("decision not applied: %v", o)
	}
	a := healthy.NextAssignment(wait)
	if r := a.GetRef(); r.GetTaskId() != "d1" || r.GetAttempt() != 2 {
		t.Fatalf("healthy got %v, want d1 attempt 2", r)
	}
	if v := version(t, cli, "d1"); v != v0+1 {
		t.Errorf("recovery and dispatch wrote the task %d times, want once", v-v0)
	}
	ready, err := cli.Get(ctx, "/reeve/ready/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if ready.Count != 0 {
		t.Errorf("%d ready keys; want none", ready.Count)
	}
	gr, err := d.c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	got := gr.GetTask()
	st := stepOf(got, "x")
	if st.GetState() != reevev1.StepState_STEP_STATE_RUNNING || st.GetAttempt() != 2 || st.GetLockedByAgent() != "healthy" {
		t.Errorf("step after recovery: %v attempt %d locked by %q; want RUNNING 2 healthy", st.GetState(), st.GetAttempt(), st.GetLockedByAgent())
	}
	h := got.GetHistory()
	if n := len(h); n < 2 || h[n-2].GetKind() != "step.retry_scheduled" || h[n-1].GetKind() != "step.dispatched" || h[n-1].GetAttempt() != 2 {
		t.Errorf("history ends %v; want step.retry_scheduled then step.dispatched of attempt 2", h[max(0, n-2):])
	}

	if ack := holder.Succeed(&reevev1.StepRef{Namespace: "default", TaskId: "d1", Step: "x", Attempt: 1}, nil); ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.FailedPrecondition {
		t.Errorf("old holder's late result: %v, want refused with FAILED_PRECONDITION", ack)
	}
	if ack := healthy.Succeed(a.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("attempt 2's result refused: %v", ack)
	}
}

package scheduler_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// An agent of namespace a never receives, sees or completes a step of
// namespace b, even when it registers the same step type and the same
// agent id as b's agent.
func TestNamespacesAreIsolatedFromEachOthersAgents(t *testing.T) {
	env, s, c := newEnv(t)
	regA := register("same-id", 4, "t")
	regA.Namespace = "a"
	agentA := testenv.ConnectRaw(t, s.Addr, regA)

	req := &reevev1.SubmitTaskRequest{Namespace: "b", TaskId: "tb", Workflow: inline(step("x", "t"))}
	submit(t, c, req)
	agentA.Quiet(500 * time.Millisecond) // b's step waits: a's agent does not get it

	regB := register("same-id", 4, "t")
	regB.Namespace = "b"
	agentB := testenv.ConnectRaw(t, s.Addr, regB)
	as := agentB.NextAssignment(wait)
	if as.GetRef().GetNamespace() != "b" {
		t.Fatalf("assignment %v, want namespace b", as.GetRef())
	}

	// A result naming b's step, sent on a's stream by an agent with the
	// holder's id, is refused and changes nothing.
	before := testenv.DataKeys(t, env.Etcd.Client())
	ack := agentA.Succeed(as.GetRef(), map[string]any{"forged": true})
	if ack.GetAccepted() || ack.GetStatus().GetCode() != int32(codes.PermissionDenied) {
		t.Fatalf("cross-namespace result ack %v, want refused with PERMISSION_DENIED", ack)
	}
	// The same with the ref's namespace rewritten to a's: no such task there.
	forged := &reevev1.StepRef{Namespace: "a", TaskId: as.GetRef().GetTaskId(), Step: as.GetRef().GetStep(), Attempt: as.GetRef().GetAttempt()}
	if ack := agentA.Succeed(forged, nil); ack.GetAccepted() {
		t.Fatalf("result for a rewritten ref accepted: %v", ack)
	}
	if after := testenv.DataKeys(t, env.Etcd.Client()); !maps.Equal(before, after) {
		t.Fatalf("refused results changed etcd: %v -> %v", before, after)
	}

	// Canceling b's task tells b's agent, never a's.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: "b", TaskId: "tb"}); err != nil {
		t.Fatal(err)
	}
	for {
		m := agentB.Next(wait)
		if m.GetCancel() != nil {
			break
		}
	}
	if m, ok := agentA.Recv(500 * time.Millisecond); ok {
		t.Fatalf("namespace a's agent got %v about namespace b's task", m)
	}
	// And b's task is not visible under a's namespace.
	if _, err := c.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: "a", TaskId: "tb"}); err == nil {
		t.Fatalf("namespace b's task found in namespace a")
	}
}

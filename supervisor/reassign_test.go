package supervisor_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// reassigned is a step without heartbeats that opts into reassignment
// after its agent's stream ends (reassign_after_disconnect).
func reassigned(grace time.Duration) *reevev1.StepSpec {
	st := step("x", "work", time.Minute)
	st.ReassignAfterDisconnect = durationpb.New(grace)
	return st
}

// An agent's connection drops and it never comes back. Its step that opts
// into reassign_after_disconnect is re-dispatched about that long after the
// stream ended, not at its one-minute complete-by, and not before; its step
// that does not opt in stays its own until its complete-by (a partitioned
// agent may still be running it).
func TestReassignAfterDisconnect(t *testing.T) {
	const grace = 500 * time.Millisecond
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Minute))
	doomed := testenv.ConnectRaw(t, s.Addr, register("doomed", "work"))
	submit(t, c, "graced", reassigned(grace))
	graced := doomed.NextAssignment(wait)
	if got := graced.GetReassignAfterDisconnect().AsDuration(); got != grace {
		t.Fatalf("assignment's reassign_after_disconnect = %v, want %v", got, grace)
	}
	submit(t, c, "kept", step("x", "work", time.Minute))
	kept := doomed.NextAssignment(wait)
	closed := time.Now()
	doomed.Close()

	survivor := testenv.ConnectRaw(t, s.Addr, register("survivor", "work"))
	as := survivor.NextAssignment(wait)
	if as.GetRef().GetTaskId() != "graced" || as.GetRef().GetAttempt() != 2 {
		t.Fatalf("survivor got %v, want graced attempt 2", as.GetRef())
	}
	redispatched := as.GetCompleteBy().AsTime().Add(-time.Minute)
	if early := redispatched.Sub(closed); early < grace {
		t.Fatalf("re-dispatched %v after the stream ended, before the %v grace", early, grace)
	}
	// Generous for a loaded machine; the complete-by was a minute away.
	if late := redispatched.Sub(closed); late > grace+3*time.Second {
		t.Fatalf("re-dispatched %v after the stream ended, want about the %v grace", late, grace)
	}
	k := getTask(t, c, "kept").GetSteps()[0]
	if k.GetAttempt() != 1 || k.GetLockedByAgent() != "doomed" || !k.GetCompleteBy().AsTime().Equal(kept.GetCompleteBy().AsTime()) {
		t.Fatalf("step without the opt-in: attempt %d on %q, complete-by %v; want attempt 1 on doomed until %v",
			k.GetAttempt(), k.GetLockedByAgent(), k.GetCompleteBy().AsTime(), kept.GetCompleteBy().AsTime())
	}
}

// An agent that reconnects within the grace and lists its attempt keeps
// it: nothing is re-dispatched, and its result is accepted.
func TestReconnectWithinTheGraceKeepsTheStep(t *testing.T) {
	const grace = 2 * time.Second
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Minute))
	a := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	submit(t, c, "kept", reassigned(grace))
	as := a.NextAssignment(wait)
	a.Close()
	waitAgentGone(t, c, "a")
	reg := register("a", "work")
	reg.Running = []*reevev1.StepRef{as.GetRef()}
	again := testenv.ConnectRaw(t, s.Addr, reg)
	for end := time.Now().Add(2 * grace); time.Now().Before(end); {
		if m, ok := again.Recv(grace / 4); ok && (m.GetAssignment() != nil || m.GetCancel() != nil) {
			t.Fatalf("after reconnecting: %v", m)
		}
	}
	if ack := again.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
	if final := testenv.WaitTask(t, c, "default", "kept", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED at attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

// The agent and its scheduler crash together: nobody saw the stream end.
// Once the scheduler's lease expires, the supervisor finds the step through
// the beating/ index (which holds steps with a reassign grace too) and it is
// re-dispatched long before its one-minute complete-by.
func TestReassignAfterDisconnectOfAnAgentLostWithItsScheduler(t *testing.T) {
	env := testenv.New(t)
	doomedSched := env.StartScheduler("", scheduler.WithSessionTTL(2))
	other := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{other}, supervisor.WithTick(time.Minute))
	c := other.Client(t)
	doomed := testenv.ConnectRaw(t, doomedSched.Addr, register("doomed", "work"))
	submit(t, c, "lost", reassigned(500*time.Millisecond))
	doomed.NextAssignment(wait)
	waitLeading(t, sup)
	crashed := time.Now()
	doomedSched.Crash()
	doomed.Close()

	survivor := testenv.ConnectRaw(t, other.Addr, register("survivor", "work"))
	if as := survivor.NextAssignment(wait); as.GetRef().GetAttempt() != 2 {
		t.Fatalf("survivor got %v, want attempt 2", as.GetRef())
	}
	// Lease TTL (2 s) + grace + generous slack for a loaded machine.
	if after := time.Since(crashed); after > 15*time.Second {
		t.Fatalf("re-dispatched %v after the crash", after)
	}
}

// waitAgentGone waits until the scheduler has handled the end of the
// agent's stream (its record is gone from ListAgents).
func waitAgentGone(t *testing.T, c reevev1.SchedulerServiceClient, id string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range resp.GetAgents() {
			found = found || a.GetAgentId() == id
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s still listed after its stream ended", id)
		}
	}
}

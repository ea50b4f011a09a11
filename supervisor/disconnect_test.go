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

// An agent holding steps that declare a heartbeat timeout loses its
// connection without a goodbye and never comes back. Its steps are
// re-dispatched about a heartbeat timeout after its last beat, not at their
// one-minute complete-by: the scheduler writes the heartbeat deadline down
// when the stream ends, and the supervisor wakes on it.
func TestDroppedAgentsHeartbeatStepsAreRedispatched(t *testing.T) {
	const hb = 500 * time.Millisecond
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Minute))
	doomed := testenv.ConnectRaw(t, s.Addr, register("doomed", "work"))
	const n = 3
	var refs []*reevev1.StepRef
	for i := range n {
		st := step("x", "work", time.Minute)
		st.HeartbeatTimeout = durationpb.New(hb)
		submit(t, c, string(rune('a'+i)), st)
		refs = append(refs, doomed.NextAssignment(wait).GetRef())
	}
	doomed.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: refs}}})
	lastBeat := time.Now()
	doomed.Close() // the connection drops; the agent never reconnects

	survivor := testenv.ConnectRaw(t, s.Addr, register("survivor", "work"))
	for range n {
		as := survivor.NextAssignment(wait)
		redispatched := as.GetCompleteBy().AsTime().Add(-time.Minute)
		if as.GetRef().GetAttempt() != 2 {
			t.Fatalf("survivor got %v, want attempt 2", as.GetRef())
		}
		// Target: heartbeat timeout + 200 ms; generous here for a loaded
		// machine (the complete-by is a minute away). The step's retry
		// backoff (100 ms) comes on top.
		if late := redispatched.Sub(lastBeat); late > hb+3*time.Second {
			t.Fatalf("re-dispatched %v after the last heartbeat, want about the %v heartbeat timeout", late, hb)
		}
	}
}

// An agent that reconnects in time and lists its attempt keeps it: the
// complete-by written down at the disconnect is put back, and the attempt is
// not re-dispatched while the agent heartbeats on its new stream.
func TestReconnectedAgentKeepsItsHeartbeatStep(t *testing.T) {
	const hb = 2 * time.Second
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Minute))
	a := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "kept", st)
	as := a.NextAssignment(wait)
	a.Close()
	// The disconnect is written down first: complete-by moved to the
	// heartbeat deadline.
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if cur := getTask(t, c, "kept").GetSteps()[0].GetCompleteBy().AsTime(); cur.Before(as.GetCompleteBy().AsTime()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("complete-by not moved after the stream ended")
		}
	}
	reg := register("a", "work")
	reg.Running = []*reevev1.StepRef{as.GetRef()}
	again := testenv.ConnectRaw(t, s.Addr, reg)
	beat := &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}}
	// Beat for three heartbeat timeouts: long past the shortened deadline.
	for end := time.Now().Add(3 * hb); time.Now().Before(end); {
		again.Send(beat)
		if m, ok := again.Recv(hb / 4); ok && (m.GetAssignment() != nil || m.GetCancel() != nil) {
			t.Fatalf("while heartbeating on the new stream: %v", m)
		}
	}
	if ack := again.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
	if final := testenv.WaitTask(t, c, "default", "kept", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED at attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

func getTask(t *testing.T, c reevev1.SchedulerServiceClient, id string) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTask()
}

// The scheduler an agent was on crashes together with the agent: the
// heartbeats were in that scheduler's memory only. When its lease expires,
// the supervisor finds the agent's heartbeat executions through the
// beating/ index and has another scheduler move their complete-by to now
// plus the heartbeat timeout; they are re-dispatched long before their
// one-minute complete-by.
func TestHeartbeatStepsOfAnAgentLostWithItsScheduler(t *testing.T) {
	const hb = 500 * time.Millisecond
	env := testenv.New(t)
	doomedSched := env.StartScheduler("", scheduler.WithSessionTTL(2))
	other := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{other}, supervisor.WithTick(time.Minute))
	c := other.Client(t)
	doomed := testenv.ConnectRaw(t, doomedSched.Addr, register("doomed", "work"))
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "lost", st)
	first := doomed.NextAssignment(wait)
	doomed.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{first.GetRef()}}}})
	for deadline := time.Now().Add(wait); !sup.Leading(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	crashed := time.Now()
	doomedSched.Crash()
	doomed.Close()

	survivor := testenv.ConnectRaw(t, other.Addr, register("survivor", "work"))
	as := survivor.NextAssignment(wait)
	if as.GetRef().GetAttempt() != 2 {
		t.Fatalf("survivor got %v, want attempt 2", as.GetRef())
	}
	// Lease TTL (2 s) + heartbeat timeout + generous slack for a loaded
	// machine; the complete-by was a minute away.
	if after := time.Since(crashed); after > 15*time.Second {
		t.Fatalf("re-dispatched %v after the crash", after)
	}
	if h := history(getTask(t, c, "lost"), "step.agent_disconnected"); len(h) != 1 || h[0].GetActor() != "supervisor/"+sup.ID() {
		t.Fatalf("disconnect history %v, want one event by supervisor/%s", h, sup.ID())
	}
}

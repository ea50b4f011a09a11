package supervisor_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// An agent holding steps that declare a heartbeat timeout loses its
// connection without a goodbye and never comes back. Its steps are
// re-dispatched about a heartbeat timeout after its last beat, not at their
// one-minute complete-by: the scheduler keeps the heartbeat deadline in
// memory when the stream ends, and recovers them itself at that deadline.
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
	waitKeys(t, env.Etcd.Client(), "/reeve/agents/", 1) // the scheduler holds its lease
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "kept", st)
	as := a.NextAssignment(wait)
	a.Close()
	// The scheduler notices the stream's end first (it records the
	// disconnect, and keeps the heartbeat deadline in memory).
	waitKeys(t, env.Etcd.Client(), "/reeve/disconnected/", 1)
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

// waitLeading waits until sup leads.
func waitLeading(t *testing.T, sup *testenv.Supervisor) {
	t.Helper()
	for deadline := time.Now().Add(wait); !sup.Leading(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
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
	waitLeading(t, sup)
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

// waitKeys waits until exactly n keys exist under prefix.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys under %s, want %d", resp.Count, prefix, n)
		}
	}
}

// taskVersion is how many times the task's record was written.
func taskVersion(t *testing.T, cli *clientv3.Client, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/reeve/tasks/default/"+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("task record %s: %v (%d keys)", id, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Version
}

// A dropped agent's heartbeat step is recovered by the scheduler it was on,
// at its last beat plus the heartbeat timeout, in ONE write of the task
// record: the expiry and the new attempt's dispatch to an agent with room
// (no supervisor runs here, and the complete-by was a minute away).
func TestDroppedAgentsStepRecoveredByItsSchedulerInOneWrite(t *testing.T) {
	const hb = 500 * time.Millisecond
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	cli := env.Etcd.Client()
	doomed := testenv.ConnectRaw(t, s.Addr, register("doomed", "work"))
	waitKeys(t, cli, "/reeve/agents/", 1) // the scheduler holds its lease
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	st.RetryPolicy.InitialBackoff = durationpb.New(0) // due at once: dispatched in the recovery's write
	submit(t, c, "one", st)
	first := doomed.NextAssignment(wait)
	survivor := testenv.ConnectRaw(t, s.Addr, register("survivor", "work"))
	before := taskVersion(t, cli, "one")
	doomed.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{first.GetRef()}}}})
	lastBeat := time.Now()
	doomed.Close()

	as := survivor.NextAssignment(wait)
	if as.GetRef().GetAttempt() != 2 {
		t.Fatalf("survivor got %v, want attempt 2", as.GetRef())
	}
	if late := time.Since(lastBeat); late > hb+3*time.Second {
		t.Fatalf("re-dispatched %v after the last heartbeat, want about the %v heartbeat timeout", late, hb)
	}
	if writes := taskVersion(t, cli, "one") - before; writes != 1 {
		t.Fatalf("%d writes of the task record from the disconnect to the re-dispatch, want 1", writes)
	}
	task := getTask(t, c, "one")
	if h := history(task, "step.agent_disconnected"); len(h) != 1 || h[0].GetActor() != "scheduler/"+s.ID() {
		t.Fatalf("disconnect history %v, want one event by scheduler/%s", h, s.ID())
	}
	if h := history(task, "step.dispatched"); len(h) != 2 || h[1].GetAttempt() != 2 {
		t.Fatalf("dispatch history %v, want attempts 1 and 2", h)
	}
	// Its timers resolved, the scheduler forgets the disconnect.
	waitKeys(t, cli, "/reeve/disconnected/", 0)
	if ack := survivor.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
}

// An agent whose stream to scheduler A drops reconnects to scheduler B in
// time and lists its heartbeat step: B adopts it, and A, whose timer fires
// at the old heartbeat deadline, leaves it alone (no expiry, no retry).
func TestAgentReconnectedElsewhereKeepsItsHeartbeatStep(t *testing.T) {
	const hb = time.Second
	env := testenv.New(t)
	a := env.StartScheduler("")
	b := env.StartScheduler("")
	c := a.Client(t)
	cli := env.Etcd.Client()
	old := testenv.ConnectRaw(t, a.Addr, register("mover", "work"))
	waitKeys(t, cli, "/reeve/agents/", 1) // A holds its lease
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "moved", st)
	as := old.NextAssignment(wait)
	old.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}})
	old.Close()
	waitKeys(t, cli, "/reeve/disconnected/", 1) // A holds the heartbeat deadline

	reg := register("mover", "work")
	reg.Running = []*reevev1.StepRef{as.GetRef()}
	again := testenv.ConnectRaw(t, b.Addr, reg)
	beat := &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}}
	// Beat on B for three heartbeat timeouts: A's timer fires meanwhile.
	for end := time.Now().Add(3 * hb); time.Now().Before(end); {
		again.Send(beat)
		if m, ok := again.Recv(hb / 4); ok && (m.GetAssignment() != nil || m.GetCancel() != nil) {
			t.Fatalf("while heartbeating on scheduler B: %v", m)
		}
	}
	waitKeys(t, cli, "/reeve/disconnected/", 0) // A's timer resolved: nothing to do
	task := getTask(t, c, "moved")
	if h := history(task, "step.expired"); len(h) != 0 {
		t.Fatalf("expired although the agent came back: %v", h)
	}
	if h := history(task, "step.agent_reconnected"); len(h) != 1 || h[0].GetActor() != "scheduler/"+b.ID() {
		t.Fatalf("reconnect history %v, want one event by scheduler/%s", h, b.ID())
	}
	if ack := again.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
	if final := testenv.WaitTask(t, c, "default", "moved", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED at attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

// Scheduler A dies (as SIGKILL would), or stops gracefully, after an
// agent's stream to it ended and before the heartbeat deadline it kept in
// memory: its disconnected/ key goes with its lease, and the supervisor has
// another scheduler give the step a deadline of its own, so it is still
// re-dispatched long before its one-minute complete-by.
func TestHeartbeatStepOfADroppedAgentSurvivesItsScheduler(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*testenv.Scheduler)
	}{
		{"crash", (*testenv.Scheduler).Crash},
		{"graceful stop", (*testenv.Scheduler).Stop},
	} {
		t.Run(tc.name, func(t *testing.T) { droppedAgentOutlivesScheduler(t, tc.end) })
	}
}

func droppedAgentOutlivesScheduler(t *testing.T, end func(*testenv.Scheduler)) {
	const hb = 3 * time.Second
	env := testenv.New(t)
	doomedSched := env.StartScheduler("", scheduler.WithSessionTTL(2))
	other := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{other}, supervisor.WithTick(time.Minute))
	c := other.Client(t)
	cli := env.Etcd.Client()
	dropped := testenv.ConnectRaw(t, doomedSched.Addr, register("dropped", "work"))
	waitKeys(t, cli, "/reeve/agents/", 1) // A holds its lease
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "orphan", st)
	first := dropped.NextAssignment(wait)
	waitLeading(t, sup)
	dropped.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{first.GetRef()}}}})
	dropped.Close()
	waitKeys(t, cli, "/reeve/disconnected/", 1)
	waitKeys(t, cli, "/reeve/agents/", 0) // only the disconnected/ key tells
	ended := time.Now()
	end(doomedSched) // before the heartbeat deadline: nothing of A's timer runs

	survivor := testenv.ConnectRaw(t, other.Addr, register("survivor", "work"))
	as := survivor.NextAssignment(wait)
	if as.GetRef().GetAttempt() != 2 {
		t.Fatalf("survivor got %v, want attempt 2", as.GetRef())
	}
	// Lease TTL (2 s) + heartbeat timeout + slack for a loaded machine.
	if after := time.Since(ended); after > 20*time.Second {
		t.Fatalf("re-dispatched %v after the scheduler ended", after)
	}
	if h := history(getTask(t, c, "orphan"), "step.agent_disconnected"); len(h) != 1 || h[0].GetActor() != "supervisor/"+sup.ID() {
		t.Fatalf("disconnect history %v, want one event by supervisor/%s", h, sup.ID())
	}
}

// An agent dropped by scheduler A reconnects to scheduler B and adopts its
// heartbeat step; then A dies before the heartbeat deadline it held. The
// supervisor, told by A's vanished disconnected/ key, leaves the adopted
// step alone: the agent keeps heartbeating it on B and its result counts.
func TestAdoptedStepSurvivesTheOldSchedulersCrash(t *testing.T) {
	const hb = 2 * time.Second
	env := testenv.New(t)
	a := env.StartScheduler("", scheduler.WithSessionTTL(2))
	b := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{b}, supervisor.WithTick(time.Minute))
	c := b.Client(t)
	cli := env.Etcd.Client()
	waitLeading(t, sup)
	old := testenv.ConnectRaw(t, a.Addr, register("mover", "work"))
	waitKeys(t, cli, "/reeve/agents/", 1) // A holds its lease
	st := step("x", "work", time.Minute)
	st.HeartbeatTimeout = durationpb.New(hb)
	submit(t, c, "adopted", st)
	as := old.NextAssignment(wait)
	beat := &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}}
	old.Send(beat)
	old.Close()
	waitKeys(t, cli, "/reeve/disconnected/", 1)

	reg := register("mover", "work")
	reg.Running = []*reevev1.StepRef{as.GetRef()}
	again := testenv.ConnectRaw(t, b.Addr, reg)
	waitKeys(t, cli, "/reeve/agents/", 1) // B's record of the agent: adopted
	a.Crash()
	quiet := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			again.Send(beat)
			if m, ok := again.Recv(hb / 4); ok && (m.GetAssignment() != nil || m.GetCancel() != nil) {
				t.Fatalf("while heartbeating on scheduler B: %v", m)
			}
		}
	}
	// Until A's lease is gone (its key with it), then two heartbeat
	// timeouts more: long past any deadline the supervisor would set.
	for deadline := time.Now().Add(wait); ; {
		quiet(hb / 2)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Get(ctx, "/reeve/disconnected/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil && resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's disconnected/ key outlived its lease")
		}
	}
	quiet(2 * hb)
	task := getTask(t, c, "adopted")
	if h := history(task, "step.agent_disconnected"); len(h) != 0 {
		t.Fatalf("the adopted step was treated as lost: %v", h)
	}
	if ack := again.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
	if final := testenv.WaitTask(t, c, "default", "adopted", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED at attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

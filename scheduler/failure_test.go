package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// Two schedulers on one etcd race for every ready step; each attempt must be
// dispatched exactly once. No supervisor runs and the raw agents answer one
// message at a time, so the schedulers wait a minute for an acknowledgement
// and the steps have 10 minutes: on a loaded machine an assignment taken
// back unacknowledged would be dispatched again (by design), and a result
// past its complete-by would be refused and its task left RUNNING.
func TestTwoSchedulersNeverDispatchTheSameAttemptTwice(t *testing.T) {
	const tasks = 1000
	env := testenv.New(t)
	s1, s2 := env.StartScheduler("", scheduler.WithAckTimeout(time.Minute)), env.StartScheduler("", scheduler.WithAckTimeout(time.Minute))
	c := s1.Client(t)
	slow := func(name string, deps ...string) *reevev1.StepSpec {
		st := step(name, "t", deps...)
		st.Timeout = durationpb.New(10 * time.Minute)
		return st
	}

	var mu sync.Mutex
	dispatched := map[string]int{}
	var wg sync.WaitGroup
	for i, s := range []*testenv.Scheduler{s1, s2} {
		agent := testenv.ConnectRaw(t, s.Addr, register(fmt.Sprintf("agent-%d", i), 64, "t"))
		wg.Go(func() {
			for {
				m, ok := agent.Recv(2 * time.Minute)
				if !ok {
					return // stream closed at the end of the test
				}
				as := m.GetAssignment()
				if as == nil {
					continue
				}
				mu.Lock()
				dispatched[fmt.Sprintf("%s/%s/%d", as.GetRef().GetTaskId(), as.GetRef().GetStep(), as.GetRef().GetAttempt())]++
				mu.Unlock()
				agent.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
				agent.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef()}}})
			}
		})
	}

	var sub sync.WaitGroup
	for w := range 8 {
		sub.Go(func() {
			for i := w; i < tasks; i += 8 {
				submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("t%04d", i), Workflow: inline(slow("a"), slow("b", "a"))})
			}
		})
	}
	sub.Wait()
	for i := range tasks {
		if final := testenv.WaitTask(t, c, "default", fmt.Sprintf("t%04d", i), 2*time.Minute); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("task %d ended %v", i, final.GetState())
		}
	}
	s1.Kill()
	s2.Kill()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(dispatched) != 2*tasks {
		t.Fatalf("%d distinct attempts dispatched, want %d", len(dispatched), 2*tasks)
	}
	for k, n := range dispatched {
		if n != 1 {
			t.Fatalf("attempt %s dispatched %d times", k, n)
		}
	}
}

// An agent whose scheduler crashed reconnects to another and delivers the
// result of the step it was running; the task completes.
func TestResultDeliveredThroughAnotherSchedulerAfterCrash(t *testing.T) {
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	c := s2.Client(t)
	onFirst := testenv.ConnectRaw(t, s1.Addr, register("mover", 1, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "moved", Workflow: inline(step("a", "t"), step("b", "t", "a"))})
	as := onFirst.NextAssignment(wait)

	s1.Kill()
	onSecond := testenv.ConnectRaw(t, s2.Addr, &reevev1.Register{
		AgentId: "mover", StepTypes: []string{"t"}, MaxConcurrentSteps: 1, Running: []*reevev1.StepRef{as.GetRef()},
	})
	if ack := onSecond.Succeed(as.GetRef(), map[string]any{"via": "s2"}); !ack.GetAccepted() {
		t.Fatalf("result through the second scheduler refused: %v", ack)
	}
	b := onSecond.NextAssignment(wait)
	onSecond.Succeed(b.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "moved", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final state %v", final.GetState())
	}
}

// A restarted scheduler resumes from etcd: a step queued while it was down
// is dispatched once it is back, and an agent reconnecting to it finishes its
// step.
func TestSchedulerRestartResumesFromEtcd(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	addr := s.Addr
	agent := testenv.ConnectRaw(t, addr, register("a1", 2, "t"))
	c := s.Client(t)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "r1", Workflow: inline(step("a", "t"), step("b", "t", "a"))})
	as := agent.NextAssignment(wait)

	s.Kill()
	restarted := env.StartScheduler(addr)
	agent = testenv.ConnectRaw(t, restarted.Addr, &reevev1.Register{
		AgentId: "a1", StepTypes: []string{"t"}, MaxConcurrentSteps: 2, Running: []*reevev1.StepRef{as.GetRef()},
	})
	if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result after restart refused: %v", ack)
	}
	b := agent.NextAssignment(wait)
	agent.Succeed(b.GetRef(), nil)
	if final := testenv.WaitTask(t, restarted.Client(t), "default", "r1", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final state %v", final.GetState())
	}
}

// With etcd down, clients get UNAVAILABLE (not a hang, not UNKNOWN); when
// etcd returns the scheduler carries on by itself.
func TestEtcdDownGivesUnavailableAndRecovers(t *testing.T) {
	env, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "before", Workflow: inline(step("x", "t"))})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	testenv.WaitTask(t, c, "default", "before", wait)

	env.Etcd.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "during", Workflow: inline(step("x", "t"))})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("submit with etcd down: %v, want Unavailable", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Unavailable took %v", took)
	}
	if _, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "before"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("get with etcd down: %v, want Unavailable", err)
	}

	env.Etcd.Restart()
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	var task *reevev1.Task
	for deadline := time.Now().Add(wait); task == nil && time.Now().Before(deadline); {
		resp, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "after", Workflow: inline(step("x", "t"))})
		if err == nil {
			task = resp.GetTask()
			break
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("submit after etcd returned: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling etcd's recovery, bounded by the deadline
	}
	if task == nil {
		t.Fatal("etcd came back but submissions still fail")
	}
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "after", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task after recovery ended %v", final.GetState())
	}
}

// Terminal tasks are removed after the retention, with their index keys
// and the alert a FAILED one raised.
func TestTerminalTasksAreRemovedAfterRetention(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", schedulerRetention(50*time.Millisecond)...)
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 1, "t"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "old", Workflow: inline(step("x", "t"))})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	testenv.WaitTask(t, c, "default", "old", wait)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "failed", Workflow: inline(step("x", "t"))})
	agent.Fail(agent.NextAssignment(wait).GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true})
	testenv.WaitTask(t, c, "default", "failed", wait)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		_, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "old"})
		_, errFailed := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "failed"})
		alerts, errAlerts := sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{IncludeAcknowledged: true})
		if status.Code(err) == codes.NotFound && status.Code(errFailed) == codes.NotFound && errAlerts == nil && len(alerts.GetAlerts()) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("still there after retention: old %v, failed %v, alerts %v %v", err, errFailed, alerts.GetAlerts(), errAlerts)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the sweeper's next round
	}
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{State: reevev1.TaskState_TASK_STATE_SUCCEEDED})
	if err != nil || len(list.GetTasks()) != 0 {
		t.Fatalf("state index still lists the removed task: %v %v", list, err)
	}
}

// An agent that reconnects listing a running attempt while the scheduler
// cannot read etcd is refused with UNAVAILABLE (and retries), rather than
// registered with that attempt uncounted: the scheduler would think it had
// room and send work the agent must drop, leaving steps to wait for their
// complete-by. Once etcd is back the same registration counts the attempt.
func TestRegistrationWithRunningAttemptsNeedsEtcd(t *testing.T) {
	env, s, c := newEnv(t)
	first := testenv.ConnectRaw(t, s.Addr, register("a1", 1, "t"))
	long := step("x", "t")
	long.Timeout = durationpb.New(time.Minute) // outlasts the etcd outage below
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "held", Workflow: inline(long)})
	held := first.NextAssignment(wait).GetRef()
	first.Close()

	reg := register("a1", 1, "t")
	reg.Running = []*reevev1.StepRef{held}
	env.Etcd.Stop()
	if _, err := testenv.TryConnectRaw(t, s.Addr, reg); status.Code(err) != codes.Unavailable {
		t.Fatalf("register listing a running attempt with etcd down: %v, want Unavailable", err)
	}
	env.Etcd.Restart()

	var again *testenv.RawAgent
	for deadline := time.Now().Add(wait); again == nil; {
		a, err := testenv.TryConnectRaw(t, s.Addr, reg)
		switch {
		case err == nil:
			again = a
		case status.Code(err) != codes.Unavailable || time.Now().After(deadline):
			t.Fatalf("register after etcd returned: %v", err)
		default:
			time.Sleep(100 * time.Millisecond) // polling etcd's recovery, bounded by the deadline
		}
	}
	// The held attempt fills the agent's one slot: a second task waits.
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "waits", Workflow: inline(step("x", "t"))})
	if m, ok := again.Recv(time.Second); ok && m.GetAssignment() != nil {
		t.Fatalf("assignment %v sent to an agent with no room", m.GetAssignment().GetRef())
	}
	again.Succeed(held, nil)
	if next := again.NextAssignment(wait); next.GetRef().GetTaskId() != "waits" {
		t.Fatalf("after the held attempt finished got %v, want task waits", next.GetRef())
	}
}

package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// Review of slot deadlines (an attempt holding a max_running slot has its
// complete-by in the slot key's value, not in deadlines/) against what
// reads the deadline index besides the recovery pass.

// The "nothing stuck" gauges (reeve.steps.overdue, and the oldest age)
// count an overdue attempt holding a slot as they count one with a
// deadline key: here no supervisor recovers anything, and both attempts,
// one of a limited type and one of a type without a limit, are overdue.
func TestOverdueGaugeCountsSlotDeadlines(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	limitType(t, q, "erp", 1)
	reader := sdkmetric.NewManualReader()
	// Never run: it only observes its gauges (any supervisor does, leader
	// or not).
	sup, err := supervisor.New(env.Etcd.Client(), []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))},
		supervisor.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	_ = sup
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp", "free"))
	for _, typ := range []string{"erp", "free"} {
		sp := step("a", typ)
		sp.Timeout = durationpb.New(time.Second)
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)})
		a.NextAssignment(wait)
	}
	waitFlowKeys(t, env, 1, "erp running")
	var n int64
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = testenv.GaugeSum(t, reader, "reeve.steps.overdue", nil); n >= 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("reeve.steps.overdue %d with two attempts past their complete-by, one holding a max_running slot; want 2", n)
	}
}

// hourSupervisor starts a supervisor whose safety-net tick is an hour, so
// that a recovery within seconds proves it was woken by the deadline.
// slotRig starts a scheduler with max_running max on erp, a supervisor
// whose tick is an hour (so that only a deadline wakes it) and agent a
// (4 slots of erp).
func slotRig(t *testing.T, max int32) (*testenv.Env, *testenv.Scheduler, reevev1.SchedulerServiceClient, reevev1.QueueServiceClient, *testenv.RawAgent, *testenv.Supervisor) {
	t.Helper()
	env, s, c := newEnv(t)
	q := queues(t, s)
	limitType(t, q, "erp", max)
	sup := hourSupervisor(t, env, s)
	return env, s, c, q, testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp")), sup
}

// timedStep is a step of erp with a timeout of d and two attempts.
func timedStep(d time.Duration) *reevev1.StepSpec {
	sp := step("a", "erp")
	sp.Timeout = durationpb.New(d)
	sp.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
	return sp
}

func hourSupervisor(t *testing.T, env *testenv.Env, ss ...*testenv.Scheduler) *testenv.Supervisor {
	t.Helper()
	sup := env.StartSupervisor(ss, supervisor.WithTick(time.Hour))
	for deadline := time.Now().Add(wait); !sup.Leading(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	return sup
}

// nextAttempt waits for an assignment of task id's step at attempt.
func nextAttempt(t *testing.T, a *testenv.RawAgent, id string, attempt int32) *reevev1.StepAssignment {
	t.Helper()
	as := a.NextAssignment(wait)
	if as.GetRef().GetTaskId() != id || as.GetRef().GetAttempt() != attempt {
		t.Fatalf("assigned %v, want attempt %d of %s", as.GetRef(), attempt, id)
	}
	return as
}

// A missed heartbeat moves the complete-by of an attempt holding a slot to
// now (the slot key's value moves): the supervisor, whose tick is an hour,
// retries it at once.
func TestSlotDeadlineMovedByAMissedHeartbeat(t *testing.T) {
	env, _, c, _, a, _ := slotRig(t, 1)
	sp := step("a", "erp")
	sp.Timeout = durationpb.New(time.Hour)
	sp.HeartbeatTimeout = durationpb.New(500 * time.Millisecond)
	sp.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
	nextAttempt(t, a, id, 1)
	a.Succeed(nextAttempt(t, a, id, 2).GetRef(), nil)
	waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

// A deferred attempt holds no slot: its deadline key comes back with its
// complete-by, the slot goes to the next step, and the supervisor (tick an
// hour) recovers the deferred attempt at its complete-by.
func TestDeferredAttemptGetsItsDeadlineKeyBack(t *testing.T) {
	env, _, c, _, a, _ := slotRig(t, 1)
	sp := timedStep(5 * time.Second) // room to defer it first on a loaded machine
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
	first := nextAttempt(t, a, id, 1)
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: first.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{Reason: "webhook"}}}}})
	if ack := a.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatalf("deferral: %v", ack)
	}
	waitFlowKeys(t, env, 0, "deferred")
	verifyClean(t, env)
	other := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
	o := nextAttempt(t, a, other, 1)
	// The deferred attempt expires: attempt 2 waits for the slot.
	a.Quiet(6 * time.Second) // past its 5 s complete-by
	a.Succeed(o.GetRef(), nil)
	a.Succeed(nextAttempt(t, a, id, 2).GetRef(), nil)
	waitStates(t, c, []string{id, other}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

// The supervisor leader dies; the next one recovers an attempt holding a
// slot at its complete-by (its tick is an hour): its view of slots/ is
// listed when it leads.
func TestSlotDeadlineAfterSupervisorFailover(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	limitType(t, q, "erp", 2)
	first := hourSupervisor(t, env, s)
	second := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Hour))
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
	short := timedStep(time.Second)
	// One expires while no supervisor leads, one after the new leader led.
	early := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(short)}).GetId()
	nextAttempt(t, a, early, 1)
	first.Kill()
	for deadline := time.Now().Add(wait); !second.Leading(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no new leader")
		}
	}
	late := timedStep(3 * time.Second)
	lateID := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(late)}).GetId()
	got := map[string]bool{}
	for range 3 {
		as := a.NextAssignment(wait)
		got[as.GetRef().GetTaskId()+"/"+fmt.Sprint(as.GetRef().GetAttempt())] = true
		if as.GetRef().GetAttempt() == 2 {
			a.Succeed(as.GetRef(), nil)
		}
	}
	for _, k := range []string{lateID + "/1", early + "/2", lateID + "/2"} {
		if !got[k] {
			t.Fatalf("assignments %v; want %s", got, k)
		}
	}
	waitStates(t, c, []string{early, lateID}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

// An agent lost with its scheduler: the supervisor moves the complete-by
// of its heartbeat attempt holding a slot (AGENT_LOST: the slot key's
// value moves) and retries it at the new one, long before the hour.
func TestSlotDeadlineOfAnAgentLostWithItsScheduler(t *testing.T) {
	env := testenv.New(t)
	doomed := env.StartScheduler("", scheduler.WithSessionTTL(2))
	other := env.StartScheduler("")
	q := queues(t, other)
	limitType(t, q, "erp", 1)
	waitApplied(t, queues(t, doomed), "erp", 1)
	hourSupervisor(t, env, other)
	c := other.Client(t)
	lost := testenv.ConnectRaw(t, doomed.Addr, register("lost", 4, "erp"))
	sp := step("a", "erp")
	sp.Timeout = durationpb.New(time.Hour)
	sp.HeartbeatTimeout = durationpb.New(500 * time.Millisecond)
	sp.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
	as := nextAttempt(t, lost, id, 1)
	lost.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}})
	waitFlowKeys(t, env, 1, "running")
	doomed.Crash()
	lost.Close()
	b := testenv.ConnectRaw(t, other.Addr, register("b", 4, "erp"))
	b.Succeed(nextAttempt(t, b, id, 2).GetRef(), nil)
	waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

// A compensation of a limited type holds a slot of its own type; its
// complete-by is in that slot key, and the supervisor (tick an hour)
// retries it at its complete-by.
func TestSlotDeadlineOfACompensation(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	limitType(t, q, "undo", 1)
	hourSupervisor(t, env, s)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "do", "undo"))
	first := step("a", "do")
	first.Compensation = &reevev1.CompensationSpec{Type: "undo", Timeout: durationpb.New(time.Second),
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3}}
	failing := step("b", "do", "a")
	failing.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
	failing.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(first, failing)}).GetId()
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	a.Fail(a.NextAssignment(wait).GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true})
	comp := a.NextAssignment(wait)
	if !comp.GetCompensation() {
		t.Fatalf("assignment %v; want the compensation", comp.GetRef())
	}
	waitFlowKeys(t, env, 1, "compensation running")
	retry := a.NextAssignment(wait)
	if !retry.GetCompensation() || retry.GetRef().GetAttempt() != comp.GetRef().GetAttempt()+1 {
		t.Fatalf("assignment %v; want the compensation's next attempt", retry.GetRef())
	}
	a.Succeed(retry.GetRef(), nil)
	waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_COMPENSATED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

// etcd restarts under a leading supervisor (tick an hour): its watch of
// slots/ breaks and is listed again, and an attempt claimed into a slot
// meanwhile is still recovered at its complete-by.
func TestSlotDeadlineAcrossAnEtcdRestart(t *testing.T) {
	env, _, c, _, a, sup := slotRig(t, 1)
	env.Etcd.Restart()
	sp := timedStep(time.Second)
	var id string
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(sp)})
		cancel()
		if err == nil {
			id = resp.GetTask().GetId()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit after the restart: %v", err)
		}
	}
	nextAttempt(t, a, id, 1)
	a.Succeed(nextAttempt(t, a, id, 2).GetRef(), nil)
	waitStates(t, c, []string{id}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	if !sup.Leading() {
		t.Log("the supervisor lost its leadership with the restart")
	}
	verifyClean(t, env)
}

// Many attempts of a limited type expire one after another, each at its
// complete-by, with two schedulers and a supervisor whose tick is an
// hour: every one is recovered (woken by the slot deadlines alone), the
// limit is never exceeded, every freed slot is taken again, and nothing
// is left behind.
func TestManySlotDeadlinesExpireInTurn(t *testing.T) {
	env, s1, c := newEnv(t)
	s2 := env.StartScheduler("")
	q := queues(t, s1)
	limitType(t, q, "erp", 3)
	waitApplied(t, queues(t, s2), "erp", 3)
	slots := watchSlots(t, env, "erp")
	hourSupervisor(t, env, s1, s2)
	agents := []*testenv.RawAgent{
		testenv.ConnectRaw(t, s1.Addr, register("a", 10, "erp")),
		testenv.ConnectRaw(t, s2.Addr, register("b", 10, "erp")),
	}
	sp := timedStep(time.Second)
	// The agents ack every assignment and never answer.
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, ok := a.Recv(50 * time.Millisecond)
				if as := m.GetAssignment(); ok && as != nil {
					n.Add(1)
					a.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
				}
			}
		})
	}
	var ids []string
	for range 12 {
		ids = append(ids, submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId())
	}
	// 24 attempts, 3 at a time, a second each.
	waitStates(t, c, ids, reevev1.TaskState_TASK_STATE_FAILED, 60*time.Second)
	close(stop)
	wg.Wait()
	if n := n.Load(); n != 24 {
		t.Errorf("%d assignments; want 24", n)
	}
	if got := slots.most(); got > 3 {
		t.Errorf("%d slots held at once; max_running is 3", got)
	}
	waitFlowKeys(t, env, 0, "all ended")
	verifyClean(t, env)
}

// `reeve verify` finds nothing wrong while attempts hold slot deadlines,
// one of them with a complete-by moved since its claim (a missed
// heartbeat: moved to now, in the slot key's value; no supervisor runs).
func TestVerifyWhileSlotDeadlinesRun(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	limitType(t, q, "erp", 2)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
	beat := step("a", "erp")
	beat.Timeout = durationpb.New(time.Hour)
	beat.HeartbeatTimeout = durationpb.New(300 * time.Millisecond)
	missed := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(beat)}).GetId()
	nextAttempt(t, a, missed, 1)
	plain := step("a", "erp")
	plain.Timeout = durationpb.New(time.Hour)
	other := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(plain)}).GetId()
	nextAttempt(t, a, other, 1)
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if stepOf(getTask(t, c, missed), "a").GetCompleteBy().AsTime().Before(time.Now().Add(time.Minute)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("complete-by not moved after the missed heartbeat")
		}
	}
	waitFlowKeys(t, env, 2, "both running")
	verifyClean(t, env)
}

// A limit cleared while attempts hold slot deadlines: they keep their
// slots (and their complete-by there), one expires and is recovered (tick
// an hour), its retry runs without a slot; a limit set again adopts the
// retry (a deadline key) beside the attempt still holding its slot.
func TestSlotDeadlinesAcrossAClearedLimit(t *testing.T) {
	env, _, c, q, a, _ := slotRig(t, 2)
	short := timedStep(5 * time.Second) // its retry must outlive the checks below
	long := step("a", "erp")
	long.Timeout = durationpb.New(time.Hour)
	held := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(long)}).GetId()
	heldAs := nextAttempt(t, a, held, 1)
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(short)}).GetId()
	nextAttempt(t, a, id, 1)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", Clear: true})
	retry := nextAttempt(t, a, id, 2)
	if st := stepOf(getTask(t, c, id), "a"); st.GetSlot() != 0 || st.GetSlotDeadline() {
		t.Errorf("retry without a limit: slot %d, slot_deadline %v", st.GetSlot(), st.GetSlotDeadline())
	}
	verifyClean(t, env)
	limitType(t, q, "erp", 1)
	waitRunning(t, q, "erp", 2)
	if st := stepOf(getTask(t, c, id), "a"); st.GetSlot() == 0 || st.GetSlotLimit() != 0 || st.GetSlotDeadline() {
		t.Errorf("retry after the limit: slot %d, slot_limit %d, slot_deadline %v; want adopted", st.GetSlot(), st.GetSlotLimit(), st.GetSlotDeadline())
	}
	verifyClean(t, env)
	a.Succeed(retry.GetRef(), nil)
	a.Succeed(heldAs.GetRef(), nil)
	waitStates(t, c, []string{id, held}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitFlowKeys(t, env, 0, "ended")
	verifyClean(t, env)
}

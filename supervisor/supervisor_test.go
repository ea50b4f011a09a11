package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

func step(name, typ string, timeout time.Duration, deps ...string) *reevev1.StepSpec {
	return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(timeout),
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(100 * time.Millisecond)}}
}

func submit(t *testing.T, c reevev1.SchedulerServiceClient, id string, steps ...*reevev1.StepSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id,
		Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "sup", Steps: steps}}}); err != nil {
		t.Fatal(err)
	}
}

func register(id string, types ...string) *reevev1.Register {
	return &reevev1.Register{AgentId: id, StepTypes: types, MaxConcurrentSteps: 8}
}

func history(task *reevev1.Task, kind string) []*reevev1.HistoryEvent {
	var out []*reevev1.HistoryEvent
	for _, h := range task.GetHistory() {
		if h.GetKind() == kind {
			out = append(out, h)
		}
	}
	return out
}

// An agent killed mid-step never answers; after the complete-by the
// supervisor has the step retried, and another agent completes it.
func TestKilledAgentsStepIsRetriedAndCompleted(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	doomed := testenv.ConnectRaw(t, s.Addr, register("doomed", "work"))
	submit(t, c, "k1", step("x", "work", 300*time.Millisecond))
	first := doomed.NextAssignment(wait)
	doomed.Close() // killed mid-step

	survivor := testenv.ConnectRaw(t, s.Addr, register("survivor", "work"))
	second := survivor.NextAssignment(wait)
	if second.GetRef().GetAttempt() != 2 || second.GetIdempotencyKey() != first.GetIdempotencyKey() {
		t.Fatalf("retry %v, want attempt 2 with the same idempotency key", second.GetRef())
	}
	// Backoff respected: attempt 2 was dispatched no earlier than attempt 1's
	// complete-by plus the initial backoff.
	dispatched2 := second.GetCompleteBy().AsTime().Add(-300 * time.Millisecond)
	if earliest := first.GetCompleteBy().AsTime().Add(100 * time.Millisecond); dispatched2.Before(earliest) {
		t.Fatalf("attempt 2 dispatched at %v, before complete-by + backoff %v", dispatched2, earliest)
	}
	survivor.Succeed(second.GetRef(), map[string]any{"ok": true})
	final := testenv.WaitTask(t, c, "default", "k1", wait)
	x := final.GetSteps()[0]
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || x.GetAttempt() != 2 || x.GetFailureCount() != 1 {
		t.Fatalf("task %v attempt %d failures %d, want SUCCEEDED at attempt 2 with 1 failure", final.GetState(), x.GetAttempt(), x.GetFailureCount())
	}
	if h := history(final, "step.expired"); len(h) != 1 || h[0].GetActor() != "supervisor/"+sup.ID() {
		t.Fatalf("expiry history %v, want one event by supervisor/%s", h, sup.ID())
	}
}

// The old attempt's holder is told to cancel, and its late result is refused.
func TestLateResultOfOldAttemptIsRefusedAndHolderCanceled(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("slow", "work"))
	submit(t, c, "late", step("x", "work", 300*time.Millisecond))
	first := agent.NextAssignment(wait)

	var cancel *reevev1.CancelStep
	var second *reevev1.StepAssignment
	for deadline := time.Now().Add(wait); (cancel == nil || second == nil) && time.Now().Before(deadline); {
		m := agent.Next(wait)
		if m.GetCancel() != nil {
			cancel = m.GetCancel()
		}
		if m.GetAssignment() != nil {
			second = m.GetAssignment()
		}
	}
	if cancel.GetRef().GetAttempt() != 1 || second.GetRef().GetAttempt() != 2 {
		t.Fatalf("cancel %v, retry %v; want cancel of attempt 1 and attempt 2", cancel.GetRef(), second.GetRef())
	}
	if ack := agent.Succeed(first.GetRef(), map[string]any{"late": true}); ack.GetAccepted() || ack.GetStatus().GetCode() != int32(codes.FailedPrecondition) {
		t.Fatalf("late result ack %v, want refused", ack)
	}
	agent.Succeed(second.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "late", wait); final.GetSteps()[0].GetOutput() != nil {
		t.Fatalf("the late result's output was recorded: %v", final.GetSteps()[0].GetOutput())
	}
}

func TestEscalations(t *testing.T) {
	cases := []struct {
		name       string
		escalation reevev1.Escalation
		want       reevev1.TaskState
		alert      bool
	}{
		{"fail", reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED, true},
		{"compensate", reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.TaskState_TASK_STATE_COMPENSATED, false},
		{"wait then retry", reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, reevev1.TaskState_TASK_STATE_SUCCEEDED, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			s := env.StartScheduler("")
			env.StartSupervisor([]*testenv.Scheduler{s})
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a", "book", "unbook", "flaky"))
			book := step("book", "book", 10*time.Second)
			book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
			flaky := step("flaky", "flaky", 200*time.Millisecond, "book")
			flaky.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
			flaky.Escalation = tc.escalation
			flaky.EscalationWait = durationpb.New(500 * time.Millisecond)
			submit(t, c, "esc", book, flaky)

			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
			silent := agent.NextAssignment(wait) // never answered: expires
			for done := tc.escalation == reevev1.Escalation_ESCALATION_FAIL; !done; {
				m := agent.Next(wait)
				as := m.GetAssignment()
				switch {
				case as == nil:
					continue
				case as.GetType() == "unbook":
					agent.Succeed(as.GetRef(), nil)
					done = true
				case as.GetType() == "flaky":
					if gap := as.GetCompleteBy().AsTime().Sub(silent.GetCompleteBy().AsTime()); gap < 500*time.Millisecond+200*time.Millisecond {
						t.Fatalf("wait_then_retry redispatched %v after the expiry, want at least the 500ms wait", gap-200*time.Millisecond)
					}
					agent.Succeed(as.GetRef(), nil)
					done = true
				}
			}
			final := testenv.WaitTask(t, c, "default", "esc", wait)
			if final.GetState() != tc.want {
				t.Fatalf("task %v (%s), want %v", final.GetState(), final.GetReason(), tc.want)
			}
			alerts := listAlerts(t, s)
			if got := len(alerts) == 1 && alerts[0].GetTaskId() == "esc" && alerts[0].GetStep() == "flaky"; got != tc.alert {
				t.Fatalf("alerts %v, want an alert naming flaky: %v", alerts, tc.alert)
			}
		})
	}
}

func listAlerts(t *testing.T, s *testenv.Scheduler) []*reevev1.Alert {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr)).ListAlerts(ctx, &reevev1.ListAlertsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAlerts()
}

// A compensation that fails permanently leaves the task FAILED with an alert
// naming the step; an operator acknowledges it.
func TestFailingCompensationFailsTaskWithAlert(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "book", "unbook", "ship"))
	book := step("book", "book", 10*time.Second)
	book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
	ship := step("ship", "ship", 10*time.Second, "book")
	ship.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	submit(t, c, "cf", book, ship)
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	agent.Fail(agent.NextAssignment(wait).GetRef(), &reevev1.StepError{Message: "no carrier", NonRetryable: true})
	unbook := agent.NextAssignment(wait)
	if unbook.GetType() != "unbook" || !unbook.GetCompensation() {
		t.Fatalf("assignment %v, want the compensation of book", unbook)
	}
	agent.Fail(unbook.GetRef(), &reevev1.StepError{Message: "booking system gone", NonRetryable: true})

	final := testenv.WaitTask(t, c, "default", "cf", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_FAILED || !strings.Contains(final.GetReason(), `compensation of step "book"`) {
		t.Fatalf("task %v %q, want FAILED naming the compensation of book", final.GetState(), final.GetReason())
	}
	alerts := listAlerts(t, s)
	if len(alerts) != 1 || alerts[0].GetStep() != "book" || alerts[0].GetAcknowledged() {
		t.Fatalf("alerts %v, want one unacknowledged alert naming book", alerts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	if _, err := sup.AckAlert(ctx, &reevev1.AckAlertRequest{AlertId: alerts[0].GetId(), AcknowledgedBy: "ops"}); err != nil {
		t.Fatal(err)
	}
	if left := listAlerts(t, s); len(left) != 0 {
		t.Fatalf("acknowledged alert still listed: %v", left)
	}

	// The operator fixes the booking system and retries the compensation.
	if _, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "cf", Step: "book", Reason: "booking system back"}); err != nil {
		t.Fatal(err)
	}
	again := agent.NextAssignment(wait)
	if again.GetType() != "unbook" {
		t.Fatalf("after operator retry got %v, want unbook", again)
	}
	agent.Succeed(again.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "cf", wait); final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v after the operator's retry, want COMPENSATED", final.GetState())
	}
}

// Of two supervisors only one leads; when it dies the other takes over
// within the session TTL and recovers expired steps.
func TestFailoverToSecondSupervisor(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	first := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithID("first"))
	waitFor(t, "a leader", func() bool { return first.Leading() })
	second := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithID("second"))
	time.Sleep(300 * time.Millisecond) // second has had time to campaign
	if second.Leading() {
		t.Fatal("two supervisors lead at once")
	}

	first.Kill()
	killed := time.Now()
	waitFor(t, "the second supervisor to lead", func() bool { return second.Leading() })
	if took := time.Since(killed); took > 5*time.Second {
		t.Fatalf("failover took %v, want within the 2s session TTL (+ slack)", took)
	}

	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	submit(t, c, "fo", step("x", "work", 200*time.Millisecond))
	agent.NextAssignment(wait)
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "fo", wait)
	if h := history(final, "step.expired"); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || len(h) != 1 || h[0].GetActor() != "supervisor/second" {
		t.Fatalf("task %v, expiry history %v; want recovery by supervisor/second", final.GetState(), h)
	}
}

// A leader that lost its session is fenced: its call changes nothing.
func TestDeposedLeaderIsRefused(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	submit(t, c, "dep", step("x", "work", 100*time.Millisecond))
	as := agent.NextAssignment(wait)
	time.Sleep(150 * time.Millisecond) // let the attempt expire

	cli := env.Etcd.Client()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	el := concurrency.NewElection(sess, "/reeve/supervisor/election")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := el.Campaign(ctx, "old-leader"); err != nil {
		t.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: el.Key(), Revision: el.Rev(), SupervisorId: "old-leader"}
	if err := sess.Close(); err != nil { // deposed: its lease and key are gone
		t.Fatal(err)
	}

	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	_, err = sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "dep", Step: "x", Attempt: as.GetRef().GetAttempt(), Fence: fence})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deposed leader's call: %v, want FailedPrecondition", err)
	}
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "dep"})
	if err != nil || got.GetTask().GetState() != reevev1.TaskState_TASK_STATE_RUNNING || got.GetTask().GetSteps()[0].GetFailureCount() != 0 {
		t.Fatalf("task after the refused call: %v %v", got.GetTask(), err)
	}
	_, err = sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: "dep", Step: "x", Attempt: 1, Fence: &reevev1.Fence{ElectionKey: "/elsewhere/x", Revision: 1, SupervisorId: "rogue"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "fence.election_key") {
		t.Fatalf("foreign fence: %v, want InvalidArgument naming fence.election_key", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A scheduler dies with its agent mid-step: nobody will deliver the result,
// so after the complete-by the supervisor (through the surviving scheduler)
// has the step retried, and the task completes.
func TestSchedulerKilledMidTaskStillCompletes(t *testing.T) {
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s1, s2})
	c := s2.Client(t)
	onS1 := testenv.ConnectRaw(t, s1.Addr, register("a1", "work"))
	submit(t, c, "sk", step("a", "work", 300*time.Millisecond), step("b", "work", 10*time.Second, "a"))
	onS1.NextAssignment(wait)
	s1.Kill()
	onS1.Close()

	onS2 := testenv.ConnectRaw(t, s2.Addr, register("a2", "work"))
	for range 2 {
		onS2.Succeed(onS2.NextAssignment(wait).GetRef(), nil)
	}
	final := testenv.WaitTask(t, c, "default", "sk", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 2 {
		t.Fatalf("task %v, step a at attempt %d; want SUCCEEDED after a retry", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

// An agent that stops heartbeating is treated as expired long before the
// step's complete-by; heartbeats themselves keep the attempt alive.
func TestMissedHeartbeatExpiresAttemptEarly(t *testing.T) {
	const hbTimeout = time.Second // 10 beats: a loaded machine delays one beat, not ten
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("beating", "long"))
	long := step("x", "long", time.Minute)
	long.HeartbeatTimeout = durationpb.New(hbTimeout)
	submit(t, c, "hb", long)
	first := agent.NextAssignment(wait)
	if first.GetHeartbeatTimeout().AsDuration() != hbTimeout {
		t.Fatalf("assignment heartbeat timeout %v", first.GetHeartbeatTimeout())
	}
	beat := func() {
		agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{first.GetRef()}}}})
	}
	// Beating for well over the heartbeat timeout keeps attempt 1 alive.
	for range 30 {
		beat()
		time.Sleep(hbTimeout / 10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "hb"})
	if err != nil || got.GetTask().GetSteps()[0].GetAttempt() != 1 || got.GetTask().GetSteps()[0].GetFailureCount() != 0 {
		t.Fatalf("while heartbeating: %v %v, want attempt 1 untouched", got.GetTask().GetSteps()[0], err)
	}
	// Silence: the attempt expires for its missed heartbeat and is retried
	// before its complete-by: waiting at most 30 s (wait) from 3 s after the
	// dispatch, attempt 2 cannot come from the minute's complete-by.
	second := agent.NextAssignment(wait)
	if second.GetRef().GetAttempt() != 2 {
		t.Fatalf("got %v, want attempt 2", second.GetRef())
	}
	agent.Succeed(second.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "hb", wait)
	if h := history(final, "step.heartbeat_missed"); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || len(h) != 1 {
		t.Fatalf("task %v, heartbeat history %v", final.GetState(), h)
	}
}

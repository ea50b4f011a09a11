package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// Durable timers (issue 35): sleep steps, delayed starts, task deadlines,
// fired by the supervisor leader through a scheduler's fenced RecoverSteps.

func sleepStep(name string, d time.Duration, deps ...string) *reevev1.StepSpec {
	return &reevev1.StepSpec{Name: name, Sleep: durationpb.New(d), DependsOn: deps}
}

func submitReq(t *testing.T, c reevev1.SchedulerServiceClient, req *reevev1.SubmitTaskRequest) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.SubmitTask(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTask()
}

func inline(id string, wf *reevev1.Workflow) *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}}
}

// dispatchedAt is when an assignment was dispatched: its complete-by less
// the step's timeout.
func dispatchedAt(as *reevev1.StepAssignment, timeout time.Duration) time.Time {
	return as.GetCompleteBy().AsTime().Add(-timeout)
}

// A sleep step waits (WAITING, complete-by = ready + sleep) with no agent,
// then succeeds by the supervisor's hand, and the step after it runs.
func TestSleepStepSucceedsAfterItsDurationAndNextStepRuns(t *testing.T) {
	const nap = 1500 * time.Millisecond
	env := testenv.New(t)
	s := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	submitReq(t, c, inline("nap", &reevev1.Workflow{Name: "sup", Steps: []*reevev1.StepSpec{
		sleepStep("nap", nap), step("after", "work", 10*time.Second, "nap")}}))

	got := getTask(t, c, "nap")
	napping := got.GetSteps()[0]
	if napping.GetState() != reevev1.StepState_STEP_STATE_WAITING || napping.GetType() != "" || got.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("sleep step %v type %q in a %v task, want WAITING with no type in a RUNNING task", napping.GetState(), napping.GetType(), got.GetState())
	}
	until := napping.GetCompleteBy().AsTime()
	if d := until.Sub(napping.GetReadyTime().AsTime()); d != nap {
		t.Fatalf("complete-by %v after ready, want the sleep %v", d, nap)
	}
	as := agent.NextAssignment(wait)
	if as.GetRef().GetStep() != "after" {
		t.Fatalf("assignment %v, want after", as.GetRef())
	}
	if at := dispatchedAt(as, 10*time.Second); at.Before(until) {
		t.Fatalf("after dispatched at %v, before the sleep ended at %v", at, until)
	}
	agent.Succeed(as.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "nap", wait)
	n := final.GetSteps()[0]
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || n.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED ||
		n.GetOutput().GetStructValue().GetFields()["slept"].GetStringValue() != "1.5s" {
		t.Fatalf("task %v, sleep step %v output %v", final.GetState(), n.GetState(), n.GetOutput())
	}
	if h := history(final, "step.sleeping"); len(h) != 1 {
		t.Fatalf("sleeping history %v", h)
	}
	woke := false
	for _, h := range history(final, "step.succeeded") {
		woke = woke || h.GetStep() == "nap" && h.GetActor() == "supervisor/"+sup.ID()
	}
	if !woke {
		t.Fatalf("no step.succeeded of nap by supervisor/%s: %v", sup.ID(), final.GetHistory())
	}
}

// A sleep outlives the scheduler that started it and the supervisor that
// led when it started: the timer is a key in etcd, nothing in memory.
func TestSleepSurvivesSchedulerKillAndSupervisorFailover(t *testing.T) {
	const nap = 3 * time.Second
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	first := env.StartSupervisor([]*testenv.Scheduler{s1, s2}, supervisor.WithID("first"))
	waitFor(t, "a leader", func() bool { return first.Leading() })
	second := env.StartSupervisor([]*testenv.Scheduler{s1, s2}, supervisor.WithID("second"))
	submitReq(t, s1.Client(t), inline("nap", &reevev1.Workflow{Name: "sup", Steps: []*reevev1.StepSpec{
		sleepStep("nap", nap), step("after", "work", 10*time.Second, "nap")}}))
	s1.Kill()
	first.Kill()
	c := s2.Client(t)
	agent := testenv.ConnectRaw(t, s2.Addr, register("a", "work"))
	as := agent.NextAssignment(wait)
	if as.GetRef().GetStep() != "after" {
		t.Fatalf("assignment %v, want after", as.GetRef())
	}
	agent.Succeed(as.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "nap", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v", final.GetState())
	}
	for _, h := range history(final, "step.succeeded") {
		if h.GetStep() == "nap" && h.GetActor() != "supervisor/second" {
			t.Fatalf("the sleep ended by %s, want supervisor/second", h.GetActor())
		}
	}
	if !second.Leading() {
		t.Fatal("second is not leading")
	}
}

// A task with a start time waits PENDING, listed with its start time, with
// nothing dispatched; at its start time its first step is dispatched, and
// its schedule-to-start deadline counts from then.
func TestDelayedStartDispatchesAtStartTime(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	start := time.Now().Add(2 * time.Second)
	req := inline("later", &reevev1.Workflow{Name: "sup", Steps: []*reevev1.StepSpec{step("x", "work", 10*time.Second)}})
	req.StartTime = timestamppb.New(start)
	task := submitReq(t, c, req)
	if task.GetState() != reevev1.TaskState_TASK_STATE_PENDING || !task.GetStartTime().AsTime().Equal(start) ||
		task.GetSteps()[0].GetReadyTime() != nil || task.GetSteps()[0].GetAttempt() != 0 {
		t.Fatalf("submitted task %v start %v step %v, want PENDING until %v with nothing ready", task.GetState(), task.GetStartTime(), task.GetSteps()[0], start)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{State: reevev1.TaskState_TASK_STATE_PENDING})
	if err != nil || len(list.GetTasks()) != 1 || list.GetTasks()[0].GetStartTime() == nil {
		t.Fatalf("PENDING list %v %v, want the task with its start time", list.GetTasks(), err)
	}
	if n := waitingToStart(t, c, "sup"); n != 1 {
		t.Fatalf("counted %d tasks of sup waiting to start, want 1", n)
	}
	as := agent.NextAssignment(wait)
	if n := waitingToStart(t, c, ""); n != 0 {
		t.Fatalf("counted %d tasks waiting to start after the start, want 0", n)
	}
	if at := dispatchedAt(as, 10*time.Second); at.Before(start) {
		t.Fatalf("dispatched at %v, before the start time %v", at, start)
	}
	agent.Succeed(as.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "later", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || len(history(final, "task.started")) != 1 {
		t.Fatalf("task %v history %v", final.GetState(), final.GetHistory())
	}
	if rt := final.GetSteps()[0].GetReadyTime().AsTime(); rt.Before(start) {
		t.Fatalf("step ready at %v, before the start %v (its schedule-to-start must count from the start)", rt, start)
	}
}

// A task waiting to start can be canceled; it then leaves the timer index.
func TestDelayedStartCanBeCanceled(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	req := inline("far", &reevev1.Workflow{Name: "sup", Steps: []*reevev1.StepSpec{step("x", "work", 10*time.Second)}})
	req.StartTime = timestamppb.New(time.Now().Add(time.Hour))
	submitReq(t, c, req)
	if n := deadlineKeys(t, env, "/far/@start/0"); n != 1 {
		t.Fatalf("%d start keys, want 1", n)
	}
	if n := waitingToStart(t, c, ""); n != 1 {
		t.Fatalf("counted %d tasks waiting to start, want 1", n)
	}
	if n := waitingToStart(t, c, "other"); n != 0 {
		t.Fatalf("counted %d tasks of another workflow waiting to start, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "far", Reason: "changed my mind"})
	if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("cancel: %v %v", resp.GetTask().GetState(), err)
	}
	if st := resp.GetTask().GetSteps()[0].GetState(); st != reevev1.StepState_STEP_STATE_SKIPPED {
		t.Fatalf("step %v, want SKIPPED", st)
	}
	if n := deadlineKeys(t, env, "/far/"); n != 0 {
		t.Fatalf("%d deadline keys left for the canceled task", n)
	}
	if n := waitingToStart(t, c, ""); n != 0 {
		t.Fatalf("counted %d tasks waiting to start after the cancel, want 0", n)
	}
}

// waitingToStart is CountTasks' count of the tasks waiting for their start
// time (of workflow wf when not empty), which it must report.
func waitingToStart(t *testing.T, c reevev1.SchedulerServiceClient, wf string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Workflow: wf})
	if err != nil || resp.GetWaitingToStart() == nil {
		t.Fatalf("count tasks: %v, waiting_to_start %v", err, resp.GetWaitingToStart())
	}
	return resp.GetWaitingToStart().GetValue()
}

func deadlineKeys(t *testing.T, env *testenv.Env, suffix string) int {
	t.Helper()
	n := 0
	for k := range testenv.DataKeys(t, env.Etcd.Client()) {
		if strings.Contains(k, "/deadlines/") && strings.Contains(k, suffix) {
			n++
		}
	}
	return n
}

// Past its task timeout a task escalates whatever step it is in: the
// running attempt is revoked, then the task is compensated when a step
// declares a compensation, else failed with an alert.
func TestTaskTimeoutEscalates(t *testing.T) {
	for _, compensate := range []bool{true, false} {
		name := "fail"
		if compensate {
			name = "compensate"
		}
		t.Run(name, func(t *testing.T) {
			env := testenv.New(t)
			s := env.StartScheduler("")
			env.StartSupervisor([]*testenv.Scheduler{s})
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a", "book", "unbook", "slow"))
			book := step("book", "book", 10*time.Second)
			if compensate {
				book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
			}
			wf := &reevev1.Workflow{Name: "sup", TaskTimeout: durationpb.New(2 * time.Second),
				Steps: []*reevev1.StepSpec{book, step("slow", "slow", time.Minute, "book")}}
			task := submitReq(t, c, inline("tt", wf))
			if d := task.GetDeadline().AsTime().Sub(task.GetCreateTime().AsTime()); d != 2*time.Second {
				t.Fatalf("deadline %v after creation, want the task timeout", d)
			}
			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
			slow := agent.NextAssignment(wait) // never answered
			var revoked bool
			for done := false; !done; {
				m := agent.Next(wait)
				switch {
				case m.GetCancel() != nil:
					revoked = revoked || m.GetCancel().GetRef().GetStep() == "slow" && m.GetCancel().GetRef().GetAttempt() == slow.GetRef().GetAttempt()
					done = !compensate
				case m.GetAssignment().GetType() == "unbook":
					agent.Succeed(m.GetAssignment().GetRef(), nil)
					done = true
				}
			}
			if !revoked {
				t.Fatal("the running attempt of slow was not revoked")
			}
			final := testenv.WaitTask(t, c, "default", "tt", wait)
			want := reevev1.TaskState_TASK_STATE_FAILED
			if compensate {
				want = reevev1.TaskState_TASK_STATE_COMPENSATED
			}
			if final.GetState() != want || !strings.HasPrefix(final.GetReason(), "task_timeout: ") || len(history(final, "task.timed_out")) != 1 {
				t.Fatalf("task %v %q, want %v for task_timeout", final.GetState(), final.GetReason(), want)
			}
			if st := final.GetSteps()[1].GetState(); st != reevev1.StepState_STEP_STATE_CANCELED {
				t.Fatalf("slow %v, want CANCELED", st)
			}
			alerts := listAlerts(t, s)
			if got := len(alerts) == 1 && alerts[0].GetTaskId() == "tt"; got == compensate {
				t.Fatalf("alerts %v; want one only when the task failed", alerts)
			}
		})
	}
}

// A sleep is seen: its wait is a span in the task's trace (from ready to
// wake), and the leader records how late it decided the timer.
func TestSleepSpanAndTimerLateness(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithIDGenerator(telemetry.IDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithTracerProvider(tp))
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	c := s.Client(t)
	submitReq(t, c, inline("traced", &reevev1.Workflow{Name: "sup", Steps: []*reevev1.StepSpec{sleepStep("nap", time.Second)}}))
	final := testenv.WaitTask(t, c, "default", "traced", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v", final.GetState())
	}
	// The span is recorded once the wake's write returned, just after the
	// task became SUCCEEDED.
	var sleep *tracetest.SpanStub
	waitFor(t, "the reeve.step.sleep span", func() bool {
		for _, sp := range spans.GetSpans() {
			if sp.Name == "reeve.step.sleep" {
				sleep = &sp
			}
		}
		return sleep != nil
	})
	if d := sleep.EndTime.Sub(sleep.StartTime); d < time.Second {
		t.Fatalf("sleep span lasts %v, want at least the 1s sleep", d)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "reeve.supervisor.timer.lateness" {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d timer lateness samples, want 1", n)
	}
}

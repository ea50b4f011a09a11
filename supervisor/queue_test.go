package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// No agent ever registers the step's type: the step stays queued, visible as
// such, until its schedule-to-start deadline; then the supervisor applies
// the step's policy (retry while attempts remain, then the escalation), and
// a failed task raises an alert.
func TestScheduleToStartTimeoutEscalates(t *testing.T) {
	const sts = time.Second // the window in which the test sees attempt 1 queued
	cases := []struct {
		name       string
		escalation reevev1.Escalation
		// viaDefault sets the timeout as the scheduler's default instead of
		// on the step.
		viaDefault bool
		want       reevev1.TaskState
		alert      bool
	}{
		{"fail, scheduler default", reevev1.Escalation_ESCALATION_FAIL, true, reevev1.TaskState_TASK_STATE_FAILED, true},
		{"compensate", reevev1.Escalation_ESCALATION_COMPENSATE, false, reevev1.TaskState_TASK_STATE_COMPENSATED, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			var opts []scheduler.Option
			if tc.viaDefault {
				opts = append(opts, scheduler.WithDefaultScheduleToStart(sts))
			}
			s := env.StartScheduler("", opts...)
			env.StartSupervisor([]*testenv.Scheduler{s})
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a", "book", "unbook"))
			book := step("book", "book", 10*time.Second)
			book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
			ship := step("ship", "carrier", 10*time.Second, "book") // no agent handles "carrier"
			ship.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(100 * time.Millisecond)}
			ship.Escalation = tc.escalation
			if !tc.viaDefault {
				ship.ScheduleToStartTimeout = durationpb.New(sts)
			}
			submit(t, c, "q", book, ship)
			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)

			// Queued and visible as such, with the deadline the supervisor
			// will act on.
			queued := waitStep(t, c, "q", "ship", func(s *reevev1.Step) bool { return taskstate.Queued(s) && s.GetFailureCount() == 0 })
			if queued.GetState() != reevev1.StepState_STEP_STATE_PENDING || queued.GetScheduleToStartDeadline() == nil ||
				!queued.GetScheduleToStartDeadline().AsTime().Equal(queued.GetReadyTime().AsTime().Add(sts)) {
				t.Fatalf("queued step %v, want PENDING with ready_time and a deadline ready_time + %v", queued, sts)
			}

			if tc.escalation == reevev1.Escalation_ESCALATION_COMPENSATE {
				unbook := agent.NextAssignment(wait)
				if unbook.GetType() != "unbook" {
					t.Fatalf("assignment %v, want the compensation of book", unbook)
				}
				agent.Succeed(unbook.GetRef(), nil)
			}
			final := testenv.WaitTask(t, c, "default", "q", wait)
			shipped := taskstate.FindStep(final, "ship")
			if final.GetState() != tc.want || shipped.GetState() != reevev1.StepState_STEP_STATE_FAILED ||
				shipped.GetLastError().GetCode() != taskstate.CodeScheduleToStart || !strings.Contains(shipped.GetLastError().GetMessage(), `"carrier"`) {
				t.Fatalf("task %v (%s), ship %v; want %v with ship FAILED by schedule_to_start_timeout naming the type", final.GetState(), final.GetReason(), shipped, tc.want)
			}
			// Two attempts (max_attempts 2), each expired in the queue by the
			// supervisor, none ever dispatched.
			if h := history(final, "step.schedule_to_start_expired"); len(h) != 2 || shipped.GetFailureCount() != 2 || len(history(final, "step.dispatched")) != 1 {
				t.Fatalf("expiries %v, failures %d; want 2 queue expiries and only book dispatched", h, shipped.GetFailureCount())
			}
			for _, h := range history(final, "step.schedule_to_start_expired") {
				if !strings.HasPrefix(h.GetActor(), "supervisor/") {
					t.Fatalf("expiry by %q, want the supervisor", h.GetActor())
				}
			}
			alerts := listAlerts(t, s)
			if got := len(alerts) == 1 && alerts[0].GetStep() == "ship"; got != tc.alert {
				t.Fatalf("alerts %v, want an alert naming ship: %v", alerts, tc.alert)
			}
		})
	}
}

// An agent for the type that connects after a queue expiry, while attempts
// remain, runs the retried attempt: the timeout hands the step to the
// policy, it does not lose it.
func TestAgentArrivingAfterQueueExpiryRunsTheRetry(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	late := step("x", "late", 10*time.Second)
	late.ScheduleToStartTimeout = durationpb.New(200 * time.Millisecond)
	late.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 10, InitialBackoff: durationpb.New(50 * time.Millisecond)}
	submit(t, c, "arrive", late)
	waitStep(t, c, "arrive", "x", func(s *reevev1.Step) bool { return s.GetFailureCount() >= 1 })

	agent := testenv.ConnectRaw(t, s.Addr, register("latecomer", "late"))
	as := agent.NextAssignment(wait)
	if as.GetRef().GetAttempt() < 2 {
		t.Fatalf("dispatched %v, want a retried attempt", as.GetRef())
	}
	agent.Succeed(as.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "arrive", wait)
	if x := final.GetSteps()[0]; final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || x.GetScheduleToStartDeadline() != nil {
		t.Fatalf("task %v step %v, want SUCCEEDED without a queue deadline", final.GetState(), x)
	}
}

// waitStep polls GetTask until the named step satisfies cond.
func waitStep(t *testing.T, c reevev1.SchedulerServiceClient, id, name string, cond func(*reevev1.Step) bool) *reevev1.Step {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if s := taskstate.FindStep(resp.GetTask(), name); s != nil && cond(s) {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("step %s of %s never reached the expected state: %v", name, id, resp.GetTask())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

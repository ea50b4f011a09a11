package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// Operator actions on tasks that wait (issue 35 × issue 37): pause,
// resume, cancel, rerun of a task whose step waits for a completion from
// outside, sleeps, or whose start is delayed.

func pauseTask(t *testing.T, sup reevev1.SupervisorServiceClient, id string) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := sup.PauseTask(ctx, &reevev1.PauseTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("pause %s: %v", id, err)
	}
	return resp.GetTask()
}

func resumeTask(t *testing.T, sup reevev1.SupervisorServiceClient, id string) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := sup.ResumeTask(ctx, &reevev1.ResumeTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	return resp.GetTask()
}

// keysOfTask counts the etcd keys under prefix (e.g. "/reeve/waiting/")
// that name task id.
func keysOfTask(t *testing.T, env *testenv.Env, prefix, id string) int {
	t.Helper()
	n := 0
	for k := range testenv.DataKeys(t, env.Etcd.Client()) {
		if strings.HasPrefix(k, prefix) && strings.Contains(k, "/"+id+"/") {
			n++
		}
	}
	return n
}

// A paused task's waiting step still waits and is completed: its
// complete-by holds (deadline key), a completion is accepted, and the step
// after it is not dispatched until the task is resumed.
func TestPausedTaskWaitingStepIsCompletedAndNextWaitsForResume(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "p", Workflow: approvalFlow(time.Hour, nil)})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "p", waitingAt(1))
	if got := pauseTask(t, sup, "p"); !got.GetPaused() {
		t.Fatalf("paused %v", got.GetPaused())
	}
	if n := keysOfTask(t, env, "/reeve/deadlines/", "p"); n != 1 {
		t.Fatalf("%d deadline keys of the paused waiting task, want its complete-by's", n)
	}
	if n := keysOfTask(t, env, "/reeve/waiting/", "p"); n != 1 {
		t.Fatalf("%d waiting keys of the paused waiting task, want 1", n)
	}
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "p", Step: "approve", Outcome: output("ok")})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("completion of a paused task's waiting step: %v, %v", resp, err)
	}
	agent.Quiet(300 * time.Millisecond) // ship is not dispatched while paused
	task := pollTask(t, c, "", "p", func(t *reevev1.Task) bool { return stepOf(t, "ship").GetReadyTime() != nil })
	if !task.GetPaused() || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task %v paused %v", task.GetState(), task.GetPaused())
	}
	if n := keysOfTask(t, env, "/reeve/ready/", "p") + keysOfTask(t, env, "/reeve/waiting/", "p"); n != 0 {
		t.Fatalf("%d ready or waiting keys of the paused task", n)
	}
	resumeTask(t, sup, "p")
	as := agent.NextAssignment(wait)
	if as.GetRef().GetStep() != "ship" {
		t.Fatalf("assignment %v, want ship", as.GetRef())
	}
	agent.Succeed(as.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "p", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v", final.GetState())
	}
}

// Cancel ends a wait, with and without compensation: the waiting and
// deadline keys go, a later completion is refused with a reason, and a
// completion sent before the cancel is still answered as a repeat.
func TestCancelEndsTheWait(t *testing.T) {
	for _, compensate := range []bool{false, true} {
		name := "plain"
		if compensate {
			name = "compensate"
		}
		t.Run(name, func(t *testing.T) {
			env, s, c := newEnv(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "inv.release", "ship"))
			// w: waits; done: completed before the cancel, then a second wait.
			reserve := step("reserve", "inv")
			reserve.Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
			done := &reevev1.StepSpec{Name: "done", WaitFor: "external", Timeout: durationpb.New(time.Hour), DependsOn: []string{"reserve"}}
			w := &reevev1.StepSpec{Name: "w", WaitFor: "external", Timeout: durationpb.New(time.Hour), DependsOn: []string{"done"}}
			submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "c", Workflow: inline(reserve, done, w, step("ship", "ship", "w"))})
			agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
			pollTask(t, c, "", "c", func(t *reevev1.Task) bool {
				return stepOf(t, "done").GetState() == reevev1.StepState_STEP_STATE_WAITING
			})
			first := &reevev1.CompleteStepRequest{TaskId: "c", Step: "done", Outcome: output("yes")}
			if _, err := completeStep(c, first); err != nil {
				t.Fatal(err)
			}
			pollTask(t, c, "", "c", func(t *reevev1.Task) bool { return stepOf(t, "w").GetState() == reevev1.StepState_STEP_STATE_WAITING })
			tok := tokenOf(t, c, "", "c", "w")

			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			got, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "c", NoCompensate: !compensate})
			if err != nil {
				t.Fatal(err)
			}
			if st := stepOf(got.GetTask(), "w").GetState(); st != reevev1.StepState_STEP_STATE_CANCELED {
				t.Fatalf("waiting step %v after the cancel, want CANCELED", st)
			}
			if compensate {
				comp := agent.NextAssignment(wait)
				if !comp.GetCompensation() || comp.GetRef().GetStep() != "reserve" {
					t.Fatalf("assignment %v, want reserve's compensation", comp.GetRef())
				}
				// While the task compensates, the wait is over.
				_, err = completeStep(c, &reevev1.CompleteStepRequest{Token: tok, Outcome: output("late")})
				wantRefusal(t, "a completion while the task compensates", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
				agent.Succeed(comp.GetRef(), nil)
			}
			final := testenv.WaitTask(t, c, "default", "c", wait)
			if final.GetState() != reevev1.TaskState_TASK_STATE_CANCELED && final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
				t.Fatalf("task %v", final.GetState())
			}
			for _, prefix := range []string{"/reeve/waiting/", "/reeve/deadlines/", "/reeve/ready/"} {
				if n := keysOfTask(t, env, prefix, "c"); n != 0 {
					t.Fatalf("%d keys under %s left by the canceled task", n, prefix)
				}
			}
			for _, req := range []*reevev1.CompleteStepRequest{{Token: tok, Outcome: output("late")}, {TaskId: "c", Step: "w", Outcome: output("late")}} {
				_, err := completeStep(c, req)
				wantRefusal(t, "a completion after the cancel", err, codes.FailedPrecondition, "TASK_TERMINAL")
			}
			again, err := completeStep(c, first)
			if err != nil || !again.GetRepeated() || again.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
				t.Fatalf("the completion before the cancel, again: %v, %v; want it answered as a repeat", again, err)
			}
			if _, err := c.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{TaskId: "c", Step: "w"}); err == nil {
				t.Fatal("a token of a canceled task's step was given")
			}
		})
	}
}

// A sleep ends while its task is paused (a timer is not held back, as a
// waiting step's complete-by is not), and a delayed start starts: the steps
// they make ready wait for the resume, then run.
func TestPausedTaskTimersFireAndStepsWaitForResume(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(50*time.Millisecond))
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "work"))

	nap := &reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(time.Second)}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "sleeps", Workflow: inline(nap, step("after", "work", "nap"))})
	late := &reevev1.SubmitTaskRequest{TaskId: "starts", Workflow: inline(step("first", "work")), StartTime: timestamppb.New(time.Now().Add(time.Second))}
	submit(t, c, late)
	pauseTask(t, sup, "sleeps")
	pauseTask(t, sup, "starts")

	pollTask(t, c, "", "sleeps", func(t *reevev1.Task) bool {
		return stepOf(t, "nap").GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED && stepOf(t, "after").GetReadyTime() != nil
	})
	started := pollTask(t, c, "", "starts", func(t *reevev1.Task) bool { return stepOf(t, "first").GetReadyTime() != nil })
	if !started.GetPaused() || started.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Fatalf("started task %v paused %v", started.GetState(), started.GetPaused())
	}
	agent.Quiet(300 * time.Millisecond)
	for _, id := range []string{"sleeps", "starts"} {
		if n := keysOfTask(t, env, "/reeve/ready/", id) + keysOfTask(t, env, "/reeve/deadlines/", id); n != 0 {
			t.Fatalf("%s: %d ready or deadline keys while paused", id, n)
		}
		resumeTask(t, sup, id)
		as := agent.NextAssignment(wait)
		agent.Succeed(as.GetRef(), nil)
		if final := testenv.WaitTask(t, c, "default", id, wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("%s: task %v", id, final.GetState())
		}
	}
}

// A paused task's deadline still applies: it is compensated (its workflow
// declares a compensation; nothing was done, so nothing is undone) at its
// time, and its pause is cleared.
func TestPausedTaskPastItsDeadline(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(50*time.Millisecond))
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "d", Workflow: approvalFlow(time.Hour, nil), TaskTimeout: durationpb.New(time.Second)})
	pauseTask(t, sup, "d")
	final := testenv.WaitTask(t, c, "default", "d", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || final.GetPaused() || !strings.HasPrefix(final.GetReason(), "task_timeout") {
		t.Fatalf("task %v paused %v reason %q; want COMPENSATED by its deadline, not paused", final.GetState(), final.GetPaused(), final.GetReason())
	}
	for _, prefix := range []string{"/reeve/waiting/", "/reeve/deadlines/", "/reeve/ready/"} {
		if n := keysOfTask(t, env, prefix, "d"); n != 0 {
			t.Fatalf("%d keys under %s left", n, prefix)
		}
	}
}

// defer hands the assignment off (the agent's StepResult.deferred).
func deferStep(t *testing.T, agent *testenv.RawAgent, as *reevev1.StepAssignment) {
	t.Helper()
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{Reason: "webhook"}}}}})
	if ack := agent.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatalf("deferral: %v", ack)
	}
}

// An operator's FailTask ends a deferred step and a waiting one: no wait
// is left in any index, and their tokens are refused as of an ended task.
func TestOperatorFailsTasksThatWait(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "pay", "inv", "ship"))
	pay := step("pay", "pay")
	pay.Timeout = durationpb.New(time.Hour)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "deferred", Workflow: inline(pay, step("ship", "ship", "pay"))})
	as := agent.NextAssignment(wait)
	deferStep(t, agent, as)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "waiting", Workflow: approvalFlow(time.Hour, nil)})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "waiting", waitingAt(1))
	tokens := map[string]string{"deferred": as.GetCompletionToken(), "waiting": tokenOf(t, c, "", "waiting", "approve")}
	for _, id := range []string{"deferred", "waiting"} {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: id, Reason: "given up"})
		cancel()
		if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_FAILED {
			t.Fatalf("%s: fail: %v, %v", id, resp.GetTask().GetState(), err)
		}
		for _, prefix := range []string{"/reeve/waiting/", "/reeve/deadlines/", "/reeve/ready/"} {
			if n := keysOfTask(t, env, prefix, id); n != 0 {
				t.Fatalf("%s: %d keys under %s left", id, n, prefix)
			}
		}
		_, err = completeStep(c, &reevev1.CompleteStepRequest{Token: tokens[id], Outcome: output("late")})
		wantRefusal(t, id+": a completion of a failed task", err, codes.FailedPrecondition, "TASK_TERMINAL")
	}
}

// A wait rejected for good (escalation fail) is retried by an operator:
// it waits again at once, with a new attempt and token; the rejection's
// token completes nothing; the rejection sent again is answered as a
// repeat only by its token (by name it names the new wait).
func TestOperatorRetriesARejectedWait(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "r", Workflow: approvalFlow(time.Hour, func(s *reevev1.StepSpec) {
		s.Escalation = reevev1.Escalation_ESCALATION_FAIL
	})})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "r", waitingAt(1))
	first := tokenOf(t, c, "", "r", "approve")
	no := &reevev1.CompleteStepRequest{Token: first, Outcome: reject("rejected", "no")}
	if resp, err := completeStep(c, no); err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("rejection: %v, %v", resp, err)
	}
	testenv.WaitTask(t, c, "default", "r", wait)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "r", Step: "approve"}); err != nil {
		t.Fatal(err)
	}
	task := pollTask(t, c, "", "r", waitingAt(2))
	if task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || keysOfTask(t, env, "/reeve/waiting/", "r") != 1 {
		t.Fatalf("task %v after the retry; want RUNNING with its step in the waiting index", task.GetState())
	}
	if again, err := completeStep(c, no); err != nil || !again.GetRepeated() || again.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("the rejection again by its token: %v, %v; want a repeat", again, err)
	}
	_, err := completeStep(c, &reevev1.CompleteStepRequest{Token: first, Outcome: output("yes")})
	wantRefusal(t, "another completion by the first attempt's token", err, codes.FailedPrecondition, scheduler.ReasonCompletedOtherwise)
	second := tokenOf(t, c, "", "r", "approve")
	if second == first {
		t.Fatal("the retry's token is the first attempt's")
	}
	if resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "r", Step: "approve", Outcome: reject("rejected", "no")}); err != nil || resp.GetRepeated() || resp.GetRef().GetAttempt() != 2 {
		t.Fatalf("the same rejection by name after the retry: %v, %v; want it to complete the new wait", resp, err)
	}
}

// An operator's CompensateTask of a task whose step waits ends the wait
// and undoes what was done.
func TestOperatorCompensatesATaskThatWaits(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "inv.release", "ship"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "u", Workflow: approvalFlow(time.Hour, nil)})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "u", waitingAt(1))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "u"}); err != nil {
		t.Fatal(err)
	}
	if n := keysOfTask(t, env, "/reeve/waiting/", "u"); n != 0 {
		t.Fatalf("%d waiting keys of a compensating task", n)
	}
	_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "u", Step: "approve", Outcome: output("late")})
	wantRefusal(t, "a completion of a compensating task", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
	comp := agent.NextAssignment(wait)
	if !comp.GetCompensation() {
		t.Fatalf("assignment %v, want the compensation", comp.GetRef())
	}
	agent.Succeed(comp.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "u", wait); final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v", final.GetState())
	}
}

// A paused task's wait still expires at its complete-by: its retry waits
// again at once (nothing to dispatch), with a new attempt.
func TestPausedTaskWaitExpiresAndWaitsAgain(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(50*time.Millisecond))
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "e", Workflow: approvalFlow(time.Second, func(s *reevev1.StepSpec) {
		s.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
	})})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "e", waitingAt(1))
	pauseTask(t, sup, "e")
	task := pollTask(t, c, "", "e", waitingAt(2))
	if !task.GetPaused() || keysOfTask(t, env, "/reeve/waiting/", "e") != 1 || keysOfTask(t, env, "/reeve/deadlines/", "e") != 1 {
		t.Fatalf("paused %v; want the second wait indexed while paused", task.GetPaused())
	}
	if resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "e", Step: "approve", Outcome: output("ok")}); err != nil || resp.GetRef().GetAttempt() != 2 {
		t.Fatalf("completion of the second wait: %v, %v", resp, err)
	}
}

// An operator's CompensateTask or FailTask of a task waiting to start ends
// it: nothing ran, nothing is undone, its start and deadline keys go.
func TestOperatorEndsATaskWaitingToStart(t *testing.T) {
	env, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	for _, id := range []string{"compensate", "fail"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: approvalFlow(time.Hour, nil),
			StartTime: timestamppb.New(time.Now().Add(time.Hour)), TaskTimeout: durationpb.New(2 * time.Hour)})
		if n := keysOfTask(t, env, "/reeve/deadlines/", id); n != 2 {
			t.Fatalf("%s: %d deadline keys, want @start and @deadline", id, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		var err error
		if id == "compensate" {
			_, err = sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: id})
		} else {
			_, err = sup.FailTask(ctx, &reevev1.FailTaskRequest{TaskId: id})
		}
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		final := testenv.WaitTask(t, c, "default", id, wait)
		want := map[string]reevev1.TaskState{"compensate": reevev1.TaskState_TASK_STATE_COMPENSATED, "fail": reevev1.TaskState_TASK_STATE_FAILED}[id]
		if final.GetState() != want {
			t.Fatalf("%s: task %v, want %v", id, final.GetState(), want)
		}
		for _, st := range final.GetSteps() {
			if st.GetState() != reevev1.StepState_STEP_STATE_SKIPPED {
				t.Fatalf("%s: step %s %v, want SKIPPED", id, st.GetName(), st.GetState())
			}
		}
		if n := keysOfTask(t, env, "/reeve/deadlines/", id); n != 0 {
			t.Fatalf("%s: %d deadline keys left", id, n)
		}
	}
}

// A sleep is not completed from outside: the refusal says it is a sleep.
func TestCompletionOfASleepIsRefused(t *testing.T) {
	_, _, c := newEnv(t)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "s", Workflow: inline(&reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(time.Hour)})})
	_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "s", Step: "nap", Outcome: output("woken")})
	wantRefusal(t, "a completion of a sleep", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "is a sleep until") {
		t.Fatalf("refusal %q; want it to say the step sleeps", msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = c.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{TaskId: "s", Step: "nap"})
	wantRefusal(t, "a token of a sleep", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "is a sleep") {
		t.Fatalf("refusal %q; want it to say the step sleeps", msg)
	}
}

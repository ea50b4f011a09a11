package scheduler_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// approvalFlow is reserve (agent, compensated by release) -> approve (waits
// for a completion from outside, timeout) -> ship (agent).
func approvalFlow(timeout time.Duration, approve func(*reevev1.StepSpec)) *reevev1.SubmitTaskRequest_InlineWorkflow {
	reserve := step("reserve", "inv")
	reserve.Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
	a := &reevev1.StepSpec{Name: "approve", WaitFor: "external", Timeout: durationpb.New(timeout), DependsOn: []string{"reserve"}}
	if approve != nil {
		approve(a)
	}
	return inline(reserve, a, step("ship", "ship", "approve"))
}

// pollTask polls the task until ok holds.
func pollTask(t *testing.T, c reevev1.SchedulerServiceClient, ns, id string, ok func(*reevev1.Task) bool) *reevev1.Task {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: ns, TaskId: id})
		cancel()
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if ok(resp.GetTask()) {
			return resp.GetTask()
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: condition not met within %v: %v", id, wait, resp.GetTask())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitingAt(attempt int32) func(*reevev1.Task) bool {
	return func(t *reevev1.Task) bool {
		s := stepOf(t, "approve")
		return s.GetState() == reevev1.StepState_STEP_STATE_WAITING && s.GetAttempt() == attempt
	}
}

func completeStep(c reevev1.SchedulerServiceClient, req *reevev1.CompleteStepRequest) (*reevev1.CompleteStepResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.CompleteStep(ctx, req)
}

func tokenOf(t *testing.T, c reevev1.SchedulerServiceClient, ns, id, step string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{Namespace: ns, TaskId: id, Step: step})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", id, step, err)
	}
	return resp.GetToken()
}

func output(v any) *reevev1.CompleteStepRequest_Output {
	pv, err := structpb.NewValue(v)
	if err != nil {
		panic(err)
	}
	return &reevev1.CompleteStepRequest_Output{Output: pv}
}

func reject(code, msg string) *reevev1.CompleteStepRequest_Error {
	return &reevev1.CompleteStepRequest_Error{Error: &reevev1.CompletionError{Code: code, Message: msg}}
}

// wantRefusal checks a refused completion's code and ErrorInfo reason.
func wantRefusal(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code || errorInfo(st).GetReason() != reason {
		t.Fatalf("%s: %v (ErrorInfo %v), want %v %s", what, err, errorInfo(st), code, reason)
	}
}

// A waiting step is completed by its token and by name; the same
// completion again is answered as the first was, also once the task
// ended; another one is refused; the output reaches the next step.
func TestCompleteStepByTokenAndByName(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
	for _, byToken := range []bool{true, false} {
		id := "by-name"
		if byToken {
			id = "by-token"
		}
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: approvalFlow(time.Hour, nil)})
		// Not ready yet: reserve has not succeeded.
		_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: id, Step: "approve", Outcome: output("early")})
		wantRefusal(t, "completion before the step is ready", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)

		as := agent.NextAssignment(wait)
		if as.GetRef().GetStep() != "reserve" || as.GetCompletionToken() == "" {
			t.Fatalf("assignment %v: want reserve with a completion token", as)
		}
		if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
			t.Fatalf("reserve: %v", ack)
		}
		task := pollTask(t, c, "", id, waitingAt(1))
		ap := stepOf(task, "approve")
		if ap.GetCompleteBy() == nil || ap.GetWaitStartTime() == nil || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("approve %v of a %v task: want complete-by and since", ap, task.GetState())
		}
		req := &reevev1.CompleteStepRequest{TaskId: id, Step: "approve", Outcome: output(map[string]any{"by": "ann", "ok": true})}
		if byToken {
			req = &reevev1.CompleteStepRequest{Token: tokenOf(t, c, "", id, "approve"), Outcome: output(map[string]any{"ok": true, "by": "ann"})}
		}
		resp, err := completeStep(c, req)
		if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED || resp.GetRepeated() || resp.GetRef().GetAttempt() != 1 {
			t.Fatalf("complete: %v, %v", resp, err)
		}
		again, err := completeStep(c, req)
		if err != nil || !again.GetRepeated() || again.GetState() != resp.GetState() || again.GetRef().GetAttempt() != 1 {
			t.Fatalf("the same completion again: %v, %v; want it answered as the first", again, err)
		}
		other := &reevev1.CompleteStepRequest{Token: req.GetToken(), TaskId: req.GetTaskId(), Step: req.GetStep(), Outcome: reject("rejected", "changed my mind")}
		_, err = completeStep(c, other)
		wantRefusal(t, "another completion", err, codes.FailedPrecondition, scheduler.ReasonCompletedOtherwise)

		ship := agent.NextAssignment(wait)
		if ship.GetRef().GetStep() != "ship" {
			t.Fatalf("assignment %v, want ship", ship.GetRef())
		}
		if got := ship.GetDependencyOutputs()["approve"].GetStructValue().GetFields()["by"].GetStringValue(); got != "ann" {
			t.Fatalf("ship's dependency output of approve: %v", ship.GetDependencyOutputs())
		}
		if ack := agent.Succeed(ship.GetRef(), nil); !ack.GetAccepted() {
			t.Fatalf("ship: %v", ack)
		}
		if final := testenv.WaitTask(t, c, "default", id, wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("task ended %v", final.GetState())
		}
		if again, err := completeStep(c, req); err != nil || !again.GetRepeated() {
			t.Fatalf("the same completion after the task ended: %v, %v", again, err)
		}
		_, err = completeStep(c, other)
		wantRefusal(t, "another completion after the task ended", err, codes.FailedPrecondition, scheduler.ReasonCompletedOtherwise)
	}
}

// A token completes nothing in another namespace, nor once forged.
func TestCompletionTokenOfAnotherNamespace(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRawOn(t, testenv.Dial(t, s.Addr), &reevev1.Register{AgentId: "a-1", Namespace: "shop", StepTypes: []string{"inv"}, MaxConcurrentSteps: 1})
	submit(t, c, &reevev1.SubmitTaskRequest{Namespace: "shop", TaskId: "t", Workflow: approvalFlow(time.Hour, nil)})
	as := agent.NextAssignment(wait)
	agent.Succeed(as.GetRef(), nil)
	pollTask(t, c, "shop", "t", waitingAt(1))
	tok := tokenOf(t, c, "shop", "t", "approve")

	_, err := completeStep(c, &reevev1.CompleteStepRequest{Namespace: "other", Token: tok, Outcome: output(1)})
	wantRefusal(t, "a token used in another namespace", err, codes.PermissionDenied, scheduler.ReasonInvalidCompletionToken)
	// The same task id and step in namespace "other", with shop's mac.
	b, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "rvt1."))
	forged := strings.Replace(string(b), "\x04shop", "\x04evil", 1)
	_, err = completeStep(c, &reevev1.CompleteStepRequest{Token: "rvt1." + base64.RawURLEncoding.EncodeToString([]byte(forged)), Outcome: output(1)})
	wantRefusal(t, "a forged token", err, codes.PermissionDenied, scheduler.ReasonInvalidCompletionToken)
	_, err = completeStep(c, &reevev1.CompleteStepRequest{Token: "rvt1.garbage", Outcome: output(1)})
	wantRefusal(t, "a malformed token", err, codes.PermissionDenied, scheduler.ReasonInvalidCompletionToken)
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Namespace: "shop", Token: tok, Outcome: output(1)}); err != nil {
		t.Fatalf("the token in its namespace: %v", err)
	}
	// Bad requests name the field.
	_, err = completeStep(c, &reevev1.CompleteStepRequest{TaskId: "t", Step: "approve"})
	wantRefusal(t, "no outcome", err, codes.InvalidArgument, scheduler.ReasonInvalidField)
	_, err = completeStep(c, &reevev1.CompleteStepRequest{TaskId: "t", Step: "approve", Outcome: reject("", "no code")})
	wantRefusal(t, "no error code", err, codes.InvalidArgument, scheduler.ReasonInvalidField)
}

// An error from outside fails the step for good, without a retry though
// its policy allows more attempts: with a compensation declared, the task
// is undone; without, it fails.
func TestCompletionErrorEscalates(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "inv.release"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t", Workflow: approvalFlow(time.Hour, func(s *reevev1.StepSpec) {
		s.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 5}
	})})
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	pollTask(t, c, "", "t", waitingAt(1))
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "t", Step: "approve", Outcome: reject("rejected", "over budget")})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("reject: %v, %v", resp, err)
	}
	comp := agent.NextAssignment(wait)
	if !comp.GetCompensation() || comp.GetRef().GetStep() != "reserve" || comp.GetCompletionToken() != "" {
		t.Fatalf("assignment %v: want reserve's compensation, without a token", comp)
	}
	agent.Succeed(comp.GetRef(), nil)
	final := testenv.WaitTask(t, c, "default", "t", wait)
	ap := stepOf(final, "approve")
	if final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || ap.GetState() != reevev1.StepState_STEP_STATE_FAILED || ap.GetAttempt() != 1 || ap.GetLastError().GetCode() != "rejected" {
		t.Fatalf("task %v (%s), approve %v", final.GetState(), final.GetReason(), ap)
	}
	if !strings.Contains(final.GetReason(), "rejected: over budget") {
		t.Fatalf("reason %q does not name the rejection", final.GetReason())
	}

	// Without a compensation anywhere: the task fails.
	a := &reevev1.StepSpec{Name: "approve", WaitFor: "external", Timeout: durationpb.New(time.Hour)}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t2", Workflow: inline(a)})
	pollTask(t, c, "", "t2", waitingAt(1))
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "t2", Step: "approve", Outcome: reject("rejected", "")}); err != nil {
		t.Fatal(err)
	}
	if final := testenv.WaitTask(t, c, "default", "t2", wait); final.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v, want FAILED", final.GetState())
	}
}

// When a wait's complete-by passes the supervisor escalates it as any
// step: retry (a new attempt and token; the old token completes nothing),
// then, out of attempts, the step's escalation: compensate or fail.
func TestWaitDeadlineEscalates(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(50*time.Millisecond))
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "inv.release"))
	for _, esc := range []reevev1.Escalation{reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.Escalation_ESCALATION_FAIL} {
		id := strings.ToLower(esc.String())
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: approvalFlow(500*time.Millisecond, func(s *reevev1.StepSpec) {
			s.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(time.Hour)}
			s.Escalation = esc
		})})
		agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
		pollTask(t, c, "", id, waitingAt(1))
		first := tokenOf(t, c, "", id, "approve")
		// The retry waits again at once (its backoff does not apply to a
		// wait), with a new token.
		task := pollTask(t, c, "", id, waitingAt(2))
		if e := stepOf(task, "approve").GetLastError(); e.GetCode() != "deadline_exceeded" {
			t.Fatalf("last error %v", e)
		}
		_, err := completeStep(c, &reevev1.CompleteStepRequest{Token: first, Outcome: output("late")})
		wantRefusal(t, "the expired attempt's token", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
		if second := tokenOf(t, c, "", id, "approve"); second == first {
			t.Fatal("the retry's token is the expired attempt's")
		}
		if esc == reevev1.Escalation_ESCALATION_COMPENSATE {
			comp := agent.NextAssignment(wait)
			if !comp.GetCompensation() {
				t.Fatalf("assignment %v, want a compensation", comp.GetRef())
			}
			agent.Succeed(comp.GetRef(), nil)
		}
		final := testenv.WaitTask(t, c, "default", id, wait)
		want := map[reevev1.Escalation]reevev1.TaskState{
			reevev1.Escalation_ESCALATION_COMPENSATE: reevev1.TaskState_TASK_STATE_COMPENSATED,
			reevev1.Escalation_ESCALATION_FAIL:       reevev1.TaskState_TASK_STATE_FAILED,
		}[esc]
		if final.GetState() != want || stepOf(final, "approve").GetAttempt() != 2 {
			t.Fatalf("%s: task %v, approve %v; want %v after 2 attempts", id, final.GetState(), stepOf(final, "approve"), want)
		}
	}
}

// An agent hands its step off: the step stays RUNNING, deferred, no longer
// the agent's (its slot is free, its disconnect changes nothing), until
// someone completes it with the assignment's token.
func TestDeferredStepCompletedByToken(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 1, "pay", "ship"))
	pay := step("pay", "pay")
	pay.HeartbeatTimeout = durationpb.New(time.Second)
	pay.Timeout = durationpb.New(time.Hour)
	for _, id := range []string{"t1", "t2"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(pay, step("ship", "ship", "pay"))})
	}
	first := agent.NextAssignment(wait)
	tok := first.GetCompletionToken()
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: first.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{Reason: "waiting for the bank's webhook"}}}}})
	if ack := agent.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatalf("deferral: %v", ack)
	}
	// Its slot is free: the other task's step comes.
	second := agent.NextAssignment(wait)
	if second.GetRef().GetTaskId() == first.GetRef().GetTaskId() {
		t.Fatalf("second assignment %v", second.GetRef())
	}
	id := first.GetRef().GetTaskId()
	task := getTask(t, c, id)
	p := stepOf(task, "pay")
	if p.GetState() != reevev1.StepState_STEP_STATE_RUNNING || !p.GetDeferred() || p.GetLockedByAgent() != "" || p.GetWaitStartTime() == nil {
		t.Fatalf("pay: %v, want RUNNING, deferred, no agent's", p)
	}
	// The agent goes away: the attempt it still held (the other task's) is
	// taken from it; the deferred one stays as it is.
	agent.Close()
	pollTask(t, c, "", second.GetRef().GetTaskId(), func(t *reevev1.Task) bool {
		for _, h := range t.GetHistory() {
			if h.GetStep() == "pay" && h.GetAttempt() == 1 && (h.GetKind() == "step.heartbeat_missed" || h.GetKind() == "step.expired") {
				return true
			}
		}
		return false
	})
	if p := stepOf(getTask(t, c, id), "pay"); p.GetState() != reevev1.StepState_STEP_STATE_RUNNING || p.GetAttempt() != 1 || !p.GetDeferred() {
		t.Fatalf("pay after its agent left: %v", p)
	}
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{Token: tok, Outcome: output("paid")})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("complete: %v, %v", resp, err)
	}
	next := testenv.ConnectRaw(t, s.Addr, register("a-2", 4, "ship"))
	ship := next.NextAssignment(wait)
	if ship.GetRef().GetTaskId() != id || ship.GetDependencyOutputs()["pay"].GetStringValue() != "paid" {
		t.Fatalf("ship assignment %v", ship)
	}
}

// The token is valid from the assignment on: a completion that comes
// before the agent's deferral completes the attempt, the agent is told to
// stop, and its later deferral or result is refused.
func TestCompletionByTokenBeforeTheDeferral(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 1, "pay"))
	pay := step("pay", "pay")
	pay.Timeout = durationpb.New(time.Hour)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t", Workflow: inline(pay)})
	as := agent.NextAssignment(wait)
	// By name it does not wait yet: its agent has not handed it off.
	_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "t", Step: "pay", Outcome: output("x")})
	wantRefusal(t, "by name while its agent runs it", err, codes.FailedPrecondition, scheduler.ReasonStepNotWaiting)
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Token: as.GetCompletionToken(), Outcome: output("early webhook")}); err != nil {
		t.Fatal(err)
	}
	for {
		m := agent.Next(wait)
		if cs := m.GetCancel(); cs != nil {
			if cs.GetRef().GetTaskId() != "t" || cs.GetRef().GetAttempt() != as.GetRef().GetAttempt() {
				t.Fatalf("cancel %v", cs)
			}
			break
		}
	}
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{}}}}})
	if ack := agent.NextResultAck(wait); ack.GetAccepted() {
		t.Fatalf("a deferral after the completion: %v, want refused", ack)
	}
	final := testenv.WaitTask(t, c, "default", "t", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || stepOf(final, "pay").GetOutput().GetStringValue() != "early webhook" {
		t.Fatalf("task %v, pay %v", final.GetState(), stepOf(final, "pay"))
	}
}

// The steps waiting for a completion from outside are listed from the
// waiting index, oldest first, in pages; a completed one leaves it, a
// deferred one is in it.
func TestListWaitingSteps(t *testing.T) {
	_, s, c := newEnv(t)
	wait1 := &reevev1.StepSpec{Name: "approve", WaitFor: "external", Timeout: durationpb.New(time.Hour)}
	for _, id := range []string{"w1", "w2", "w3"} {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(wait1)})
		pollTask(t, c, "", id, waitingAt(1))
	}
	list := func(size int32, token string) *reevev1.ListWaitingStepsResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		resp, err := c.ListWaitingSteps(ctx, &reevev1.ListWaitingStepsRequest{PageSize: size, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	p1 := list(2, "")
	if len(p1.GetSteps()) != 2 || p1.GetNextPageToken() == "" || p1.GetSteps()[0].GetRef().GetTaskId() != "w1" || p1.GetSteps()[1].GetRef().GetTaskId() != "w2" {
		t.Fatalf("first page %v", p1)
	}
	w := p1.GetSteps()[0]
	if w.GetRef().GetStep() != "approve" || w.GetRef().GetAttempt() != 1 || w.GetWorkflow() != "test" || w.GetDeferred() ||
		!w.GetCompleteBy().AsTime().After(w.GetWaitStartTime().AsTime()) {
		t.Fatalf("entry %v", w)
	}
	if p2 := list(2, p1.GetNextPageToken()); len(p2.GetSteps()) != 1 || p2.GetSteps()[0].GetRef().GetTaskId() != "w3" || p2.GetNextPageToken() != "" {
		t.Fatalf("second page %v", p2)
	}
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "w2", Step: "approve", Outcome: output(true)}); err != nil {
		t.Fatal(err)
	}
	// A deferred step is listed too.
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 1, "pay"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "d1", Workflow: inline(step("pay", "pay"))})
	as := agent.NextAssignment(wait)
	agent.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef(),
		Outcome: &reevev1.StepResult_Deferred{Deferred: &reevev1.StepDeferred{}}}}})
	if ack := agent.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatal(ack)
	}
	all := list(0, "")
	var got []string
	for _, w := range all.GetSteps() {
		got = append(got, fmt.Sprintf("%s/%s deferred=%v", w.GetRef().GetTaskId(), w.GetRef().GetStep(), w.GetDeferred()))
	}
	want := []string{"w1/approve deferred=false", "w3/approve deferred=false", "d1/pay deferred=true"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("waiting steps %v, want %v", got, want)
	}
	_, err := c.ListWaitingSteps(context.Background(), &reevev1.ListWaitingStepsRequest{PageToken: "!!"})
	wantRefusal(t, "a bad page token", err, codes.InvalidArgument, scheduler.ReasonInvalidField)
}

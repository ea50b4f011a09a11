package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// approval is an inline workflow whose step "approve" waits for a person
// (waitFor: external, 2h); with then, a step of that type (served by the
// demo agent) runs after it.
func approval(then string) *reevev1.SubmitTaskRequest {
	steps := []*reevev1.StepSpec{{Name: "approve", WaitFor: "external", Timeout: durationpb.New(2 * time.Hour)}}
	if then != "" {
		steps = append(steps, &reevev1.StepSpec{Name: "charge", Type: then, DependsOn: []string{"approve"}, Timeout: durationpb.New(10 * time.Second)})
	}
	return &reevev1.SubmitTaskRequest{
		Input:    structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"order_id": structpb.NewStringValue("o-7"), "amount": structpb.NewNumberValue(120)}}),
		Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "test.approval", Steps: steps}},
	}
}

// waitStep waits (at most a minute) until step of task id is in state, and
// returns the task.
func (e *env) waitStep(id, step string, state reevev1.StepState) *reevev1.Task {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := e.sched.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		cancel()
		if err == nil {
			for _, s := range resp.GetTask().GetSteps() {
				if s.GetName() == step && s.GetState() == state {
					return resp.GetTask()
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s: step %s never %v (err %v)", id, step, state, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func stepOf(t *reevev1.Task, name string) *reevev1.Step {
	for _, s := range t.GetSteps() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// The Waiting view lists a step waiting for a person with when it began
// and its complete-by; its page approves it with an output (the task goes
// on: the next step runs with it) or rejects it with an error code (the
// step fails for good: the task fails). Bad JSON, a missing code and a
// page of an attempt that is no longer waiting are refused and change
// nothing; a post without the csrf token is refused.
func TestWaitingApproveAndReject(t *testing.T) {
	e := newEnv(t)
	ok := e.submit(approval("payments.charge"))
	no := e.submit(approval(""))
	e.waitStep(ok.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	e.waitStep(no.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	b := e.browser()

	code, page := b.get("/waiting")
	if code != http.StatusOK {
		t.Fatalf("waiting: status %d; %.500s", code, textOf(page))
	}
	for _, want := range []string{`id="wait-` + ok.GetId() + `-approve"`, `id="wait-` + no.GetId() + `-approve"`, "test.approval", `id="approve-` + ok.GetId() + `-approve"`} {
		if !strings.Contains(page, want) {
			t.Errorf("waiting page: want %q in %.800s", want, textOf(page))
		}
	}
	if !strings.Contains(page, "(in 2h0m") && !strings.Contains(page, "(in 1h59m") {
		t.Errorf("waiting page: want the complete-by in about 2h, got %.800s", textOf(page))
	}
	// Filtered by another workflow: nothing.
	if _, p := b.get("/waiting?workflow=demo.orders"); !strings.Contains(p, "No step waits for a person in workflow demo.orders") {
		t.Errorf("filtered waiting page: %.500s", textOf(p))
	}

	// The task page says what it waits for, with approve and reject.
	_, tp := b.get("/tasks/" + ok.GetId())
	for _, want := range []string{`id="wait-approval-approve"`, "waiting for approval since ", ", complete-by ", `id="approve-approve"`, "waitFor: external", `st-waiting">waiting`} {
		if !strings.Contains(tp, want) {
			t.Errorf("task page: want %q in %.1500s", want, textOf(tp))
		}
	}

	_, form := b.get("/tasks/" + ok.GetId() + "/complete?step=approve")
	if !strings.Contains(form, `id="approve-submit"`) || !strings.Contains(form, `id="reject-submit"`) || !strings.Contains(form, "o-7") {
		t.Fatalf("complete page: %.1500s", textOf(form))
	}
	token := csrf(t, form)
	post := func(id string, f url.Values) (int, string) {
		t.Helper()
		f.Set("ns", "default")
		f.Set("step", "approve")
		if f.Get("csrf") == "" {
			f.Set("csrf", token)
		}
		return b.post("/tasks/"+id+"/complete", e.url, f)
	}
	// Refused, nothing changes.
	for _, c := range []struct {
		name string
		form url.Values
		code int
		want string
	}{
		{"bad JSON", url.Values{"outcome": {"approve"}, "attempt": {"1"}, "output": {"{nope"}}, http.StatusBadRequest, "output: not JSON"},
		{"no code", url.Values{"outcome": {"reject"}, "attempt": {"1"}, "code": {" "}}, http.StatusBadRequest, "code: required"},
		{"stale attempt", url.Values{"outcome": {"approve"}, "attempt": {"7"}, "output": {"{}"}}, http.StatusBadRequest, "no longer the attempt 7"},
		{"no outcome", url.Values{"attempt": {"1"}}, http.StatusBadRequest, "outcome: want approve or reject"},
		{"no csrf", url.Values{"outcome": {"approve"}, "attempt": {"1"}, "output": {"{}"}, "csrf": {"guessed"}}, http.StatusForbidden, "csrf token"},
	} {
		code, body := post(ok.GetId(), c.form)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: status %d, want %d with %q; %.600s", c.name, code, c.code, c.want, textOf(body))
		}
	}
	if st := stepOf(e.waitStep(ok.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING), "approve"); st.GetAttempt() != 1 {
		t.Fatalf("after the refusals: attempt %d", st.GetAttempt())
	}

	// Approve: the step succeeds with the output and the task goes on.
	code, body := post(ok.GetId(), url.Values{"outcome": {"approve"}, "attempt": {"1"}, "output": {`{"approved": true, "by": "<b>ann</b>"}`}})
	if code != http.StatusOK || !strings.Contains(body, `id="task-state"`) {
		t.Fatalf("approve: status %d; %.600s", code, textOf(body))
	}
	done := e.waitState(ok.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	if out := stepOf(done, "approve").GetOutput().GetStructValue().GetFields()["by"].GetStringValue(); out != "<b>ann</b>" {
		t.Errorf("approve's output: by = %q", out)
	}
	// The same approval again (a reload): answered as the first, no error.
	if code, body := post(ok.GetId(), url.Values{"outcome": {"approve"}, "attempt": {"1"}, "output": {`{"approved": true, "by": "<b>ann</b>"}`}}); code != http.StatusOK || !strings.Contains(body, `id="task-state"`) {
		t.Errorf("repeated approve: status %d; %.600s", code, textOf(body))
	}

	// Reject: the step fails for good with the code; the task fails.
	if code, body := post(no.GetId(), url.Values{"outcome": {"reject"}, "attempt": {"1"}, "code": {"denied"}, "message": {"over budget"}}); code != http.StatusOK {
		t.Fatalf("reject: status %d; %.600s", code, textOf(body))
	}
	failed := e.waitState(no.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	if le := stepOf(failed, "approve").GetLastError(); le.GetCode() != "denied" || !strings.Contains(le.GetMessage(), "over budget") {
		t.Errorf("rejected step's error: %+v", le)
	}
	// Neither waits any more.
	if _, p := b.get("/waiting"); strings.Contains(p, `id="wait-`+ok.GetId()) || strings.Contains(p, `id="wait-`+no.GetId()) || !strings.Contains(p, "No step waits for a person") {
		t.Errorf("waiting page after the decisions: %.800s", textOf(p))
	}
	if code, _ := b.get("/tasks/" + no.GetId() + "/complete?step=approve"); code != http.StatusConflict {
		t.Errorf("complete page of a failed step: status %d, want 409", code)
	}
}

// The task page says what a task waits for besides a person: a sleep
// ("sleeping until"), its start time ("waiting to start at"), and a queued
// step that flow control holds back (a paused queue).
func TestTaskPageWaits(t *testing.T) {
	e := newEnv(t)
	sleeper := e.submit(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.sleep", Steps: []*reevev1.StepSpec{{Name: "cool_off", Sleep: durationpb.New(time.Hour)}},
	}}})
	later := ref("demo.orders")
	later.StartTime = timestamppb.New(time.Now().Add(30 * time.Minute))
	delayed := e.submit(later)
	e.waitStep(sleeper.GetId(), "cool_off", reevev1.StepState_STEP_STATE_WAITING)
	b := e.browser()
	_, p := b.get("/tasks/" + sleeper.GetId())
	if !strings.Contains(p, `id="wait-sleep-cool_off"`) || !strings.Contains(p, "sleeping until ") || !strings.Contains(p, "sleep 1h0m0s") || strings.Contains(p, `id="approve-cool_off"`) {
		t.Errorf("sleeping task: %.1500s", textOf(p))
	}
	_, p = b.get("/tasks/" + delayed.GetId())
	if !strings.Contains(p, `id="wait-start"`) || !strings.Contains(p, "waiting to start at ") {
		t.Errorf("delayed task: %.1500s", textOf(p))
	}

	// A paused queue: the queued step says why it waits, and the page
	// looks again every 5 s (the reason changes without a write).
	qc := reevev1.NewQueueServiceClient(testenv.Dial(t, e.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := qc.PauseQueue(ctx, &reevev1.PauseQueueRequest{Type: "test.nobody"}); err != nil {
		t.Fatal(err)
	}
	held := e.submit(stuck())
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, p = b.get("/tasks/" + held.GetId())
		if strings.Contains(p, "waiting: queue test.nobody is paused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held task: no wait reason in %.1500s", textOf(p))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(p, `hx-trigger="every 5s"`) || !strings.Contains(p, `id="wait-queue-wait"`) {
		t.Errorf("held task: want the reason in the waits and a poll, got %.1500s", textOf(p))
	}
	if !strings.Contains(p, "pending for ") || strings.Contains(p, "running for ") {
		t.Errorf("held task: want it said pending, not running, got %.1500s", textOf(p))
	}
}

// The queues page lists every type with a limit, a pause, queued steps or
// an agent; an operator sets a limit, pauses and resumes from it; a bad
// number is refused naming the field.
func TestQueuesPage(t *testing.T) {
	e := newEnv(t)
	e.submit(stuck())
	b := e.browser()
	// The queued step shows once the scheduler's ready queue has it (fed
	// by a watch).
	var page string
	for deadline := time.Now().Add(20 * time.Second); ; {
		var code int
		code, page = b.get("/queues")
		if code != http.StatusOK {
			t.Fatalf("queues: status %d; %.500s", code, textOf(page))
		}
		if strings.Contains(page, `id="queue-test.nobody"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{`id="queue-test.nobody"`, `id="queue-payments.charge"`, `id="pause-test.nobody"`, "no agent"} {
		if !strings.Contains(page, want) {
			t.Errorf("queues page: want %q in %.2000s", want, textOf(page))
		}
	}
	token := csrf(t, page)
	post := func(typ, action string, f url.Values) (int, string) {
		t.Helper()
		f.Set("csrf", token)
		f.Set("ns", "default")
		return b.post("/queues/"+typ+"/"+action, e.url, f)
	}
	code, body := post("payments.charge", "limit", url.Values{"max_running": {"10"}, "rate": {"2.5"}, "burst": {"5"}})
	if code != http.StatusOK || !strings.Contains(body, "Set the limits of payments.charge: max running 10, 2.5/s, burst 5.") {
		t.Fatalf("limit: status %d; %.1200s", code, textOf(body))
	}
	if !strings.Contains(body, "0/10") || !strings.Contains(body, "2.5/s, burst 5") {
		t.Errorf("after limit: want 0/10 and the rate, got %.2000s", textOf(body))
	}
	if code, body := post("test.nobody", "pause", url.Values{}); code != http.StatusOK || !strings.Contains(body, `id="resume-test.nobody"`) || !strings.Contains(body, `st-paused">paused`) {
		t.Errorf("pause: status %d; %.1500s", code, textOf(body))
	}
	if code, body := post("test.nobody", "limit", url.Values{"max_running": {"many"}}); code != http.StatusBadRequest || !strings.Contains(body, "max_running: want a whole number") {
		t.Errorf("bad limit: status %d; %.500s", code, textOf(body))
	}
	if code, body := post("test.nobody", "limit", url.Values{"max_running": {"-3"}}); code != http.StatusBadRequest || !strings.Contains(body, "max_running") {
		t.Errorf("negative limit: status %d; %.500s", code, textOf(body))
	}
	if code, body := post("test.nobody", "resume", url.Values{}); code != http.StatusOK || !strings.Contains(body, `id="pause-test.nobody"`) {
		t.Errorf("resume: status %d; %.1500s", code, textOf(body))
	}
	if code, body := post("payments.charge", "clear", url.Values{}); code != http.StatusOK || !strings.Contains(body, "Cleared the limits") {
		t.Errorf("clear: status %d; %.800s", code, textOf(body))
	}
	if code, _ := post("payments.charge", "explode", url.Values{}); code != http.StatusNotFound {
		t.Errorf("unknown action: status %d, want 404", code)
	}
}

// Roles: a client-only identity (the console's viewer) sees the waiting
// steps without approve or reject, may not open the completion page, and a
// post it forges with its own valid csrf token is refused by the console
// and changes nothing; nor may it pause a queue. An approver (client and
// approver, not admin) approves, and sees no queue buttons.
func TestWaitingRoles(t *testing.T) {
	e := newSecureEnv(t)
	task := e.submit(approval(""))
	e.waitStep(task.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	signIn := func(token string) *browser {
		b := e.browser()
		if code, _ := b.post("/login", e.url, url.Values{"token": {token}}); code != http.StatusOK {
			t.Fatalf("login: status %d", code)
		}
		return b
	}

	viewer := signIn(viewerToken)
	_, page := viewer.get("/waiting")
	if !strings.Contains(page, `id="wait-`+task.GetId()+`-approve"`) || strings.Contains(page, `id="approve-`+task.GetId()) || !strings.Contains(page, "need the admin or") {
		t.Errorf("viewer's waiting page: %.1200s", textOf(page))
	}
	_, tp := viewer.get("/tasks/" + task.GetId())
	if !strings.Contains(tp, "waiting for approval since") || strings.Contains(tp, `id="approve-approve"`) {
		t.Errorf("viewer's task page: %.1200s", textOf(tp))
	}
	if code, _ := viewer.get("/tasks/" + task.GetId() + "/complete?step=approve"); code != http.StatusForbidden {
		t.Errorf("viewer's completion page: status %d, want 403", code)
	}
	code, body := viewer.post("/tasks/"+task.GetId()+"/complete", e.url, url.Values{"csrf": {csrf(t, page)}, "ns": {"default"}, "step": {"approve"},
		"attempt": {"1"}, "outcome": {"approve"}, "output": {"{}"}})
	if code != http.StatusForbidden || !strings.Contains(body, "approver role") {
		t.Errorf("viewer's forged approval: status %d; %.500s", code, textOf(body))
	}
	_, qp := viewer.get("/queues")
	if strings.Contains(qp, `action="/queues/`) {
		t.Errorf("viewer's queues page has forms: %.1200s", textOf(qp))
	}
	if code, _ := viewer.post("/queues/test.nobody/pause", e.url, url.Values{"csrf": {csrf(t, qp)}, "ns": {"default"}}); code != http.StatusForbidden {
		t.Errorf("viewer's forged pause: status %d, want 403", code)
	}
	if st := stepOf(e.waitStep(task.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING), "approve"); len(st.GetCompletionDigest()) != 0 {
		t.Fatal("the viewer's post completed the step")
	}

	approver := signIn(approverToken)
	_, page = approver.get("/waiting")
	if !strings.Contains(page, `id="approve-`+task.GetId()+`-approve"`) {
		t.Fatalf("approver's waiting page: %.1200s", textOf(page))
	}
	_, form := approver.get("/tasks/" + task.GetId() + "/complete?step=approve")
	code, body = approver.post("/tasks/"+task.GetId()+"/complete", e.url, url.Values{"csrf": {csrf(t, form)}, "ns": {"default"}, "step": {"approve"},
		"attempt": {strconv.Itoa(1)}, "outcome": {"approve"}, "output": {`{"ok": true}`}})
	if code != http.StatusOK {
		t.Fatalf("approver's approval: status %d; %.600s", code, textOf(body))
	}
	e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	if strings.Contains(body, "action-cancel") {
		t.Error("approver (not admin) sees operator actions")
	}
	_, qp = approver.get("/queues")
	if strings.Contains(qp, `action="/queues/`) {
		t.Errorf("approver's queues page has forms: %.1200s", textOf(qp))
	}
}

// Against a scheduler without ListWaitingSteps (an older release: the call
// answers UNIMPLEMENTED), the Waiting view looks through the RUNNING tasks
// instead and finds the same step, not a sleeping one.
func TestWaitingWithoutTheIndex(t *testing.T) {
	e := newEnv(t)
	task := e.submit(approval(""))
	sleeper := e.submit(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.sleep", Steps: []*reevev1.StepSpec{
			{Name: "reserve", Type: "inventory.reserve", Timeout: durationpb.New(10 * time.Second)},
			{Name: "nap", Sleep: durationpb.New(time.Hour), DependsOn: []string{"reserve"}},
		},
	}}})
	e.waitStep(task.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	e.waitStep(sleeper.GetId(), "nap", reevev1.StepState_STEP_STATE_WAITING)
	old := testenv.DialWith(t, e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == reevev1.SchedulerService_ListWaitingSteps_FullMethodName {
				return status.Error(codes.Unimplemented, "unknown method ListWaitingSteps")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	c := newEnvOn(t, old)
	_, page := c.browser().get("/waiting")
	if !strings.Contains(page, `id="wait-`+task.GetId()+`-approve"`) || !strings.Contains(page, "looked at 2 running tasks, 1 of them with a step waiting") || strings.Contains(page, "nap") {
		t.Errorf("waiting page without the index: %.1500s", textOf(page))
	}
}

package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// holdAgent connects an agent serving test.hold, whose steps run until the
// test ends.
func (e *env) holdAgent() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	a, err := agentsdk.New([]string{e.addr}, agentsdk.WithAgentID("hold-agent"), agentsdk.WithLogger(testenv.Logger()), agentsdk.WithShutdownTimeout(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	a.Handle("test.hold", func(ctx context.Context, _ *agentsdk.Step) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	a.Handle("test.defer", func(_ context.Context, s *agentsdk.Step) (any, error) {
		return nil, s.Defer("waiting for the bank's webhook")
	})
	go func() { defer close(done); _ = a.Run(ctx) }()
}

// deferring is an inline workflow whose step's agent hands it off.
func deferring() *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.defer", Steps: []*reevev1.StepSpec{{Name: "transfer", Type: "test.defer", Timeout: durationpb.New(3 * time.Hour)}},
	}}}
}

// waitDeferred waits (at most a minute) until step of task id is handed
// off by its agent.
func (e *env) waitDeferred(id, step string) {
	e.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		if st := stepOf(e.waitStep(id, step, reevev1.StepState_STEP_STATE_RUNNING), step); st.GetDeferred() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s: step %s never deferred", id, step)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hold() *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.hold", Steps: []*reevev1.StepSpec{{Name: "erp_call", Type: "test.hold", Timeout: durationpb.New(time.Hour)}},
	}}}
}

// Waits and queues in a real browser: the Waiting view, an approval typed
// into its form that completes the step (the task then runs its next step
// and succeeds), the task pages of a waiting, a sleeping, a delayed and a
// held task, and the queues page with a limit set from its form and a
// paused type paused with its button.
func TestBrowserWaitsAndQueues(t *testing.T) {
	ctx, dlg := chrome(t, func(msg string) bool { return strings.HasPrefix(msg, "Pause ") })
	e := newEnv(t)
	e.holdAgent()
	dir := shots(t)
	qc := reevev1.NewQueueServiceClient(testenv.Dial(t, e.addr))
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := qc.SetQueueLimit(cctx, &reevev1.SetQueueLimitRequest{Type: "test.hold", MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := qc.PauseQueue(cctx, &reevev1.PauseQueueRequest{Type: "test.nobody"}); err != nil {
		t.Fatal(err)
	}
	// A limit takes effect within a second: the scheduler counts the
	// type's running attempts once it applied it.
	for applied := false; !applied; {
		resp, err := qc.ListQueues(cctx, &reevev1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range resp.GetQueues() {
			applied = applied || (q.GetType() == "test.hold" && q.GetRunningCounted())
		}
		time.Sleep(10 * time.Millisecond)
	}

	first := e.submit(approval("payments.charge"))
	second := e.submit(approval(""))
	sleeper := e.submit(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.sleep", Steps: []*reevev1.StepSpec{
			{Name: "reserve", Type: "inventory.reserve", Timeout: durationpb.New(10 * time.Second)},
			{Name: "cool_off", Sleep: durationpb.New(90 * time.Minute), DependsOn: []string{"reserve"}},
			{Name: "ship", Type: "shipping.ship", DependsOn: []string{"cool_off"}, Timeout: durationpb.New(10 * time.Second)},
		},
	}}})
	later := ref("demo.orders")
	later.StartTime = timestamppb.New(time.Now().Add(45 * time.Minute))
	delayed := e.submit(later)
	running := e.submit(hold())
	e.waitStep(running.GetId(), "erp_call", reevev1.StepState_STEP_STATE_RUNNING)
	held := e.submit(hold())
	deferred := e.submit(deferring())
	e.submit(stuck())
	e.waitStep(first.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	e.waitStep(second.GetId(), "approve", reevev1.StepState_STEP_STATE_WAITING)
	e.waitStep(sleeper.GetId(), "cool_off", reevev1.StepState_STEP_STATE_WAITING)
	e.waitDeferred(deferred.GetId(), "transfer")

	// The Waiting view: both steps, with approve and reject.
	run(t, ctx, "waiting", chromedp.Navigate(e.url+"/waiting"), chromedp.WaitVisible(chromedp.CSS("#wait-"+first.GetId()+"-approve")),
		chromedp.WaitVisible(chromedp.CSS("#wait-"+second.GetId()+"-approve")))
	if w := text(t, ctx, "#wait-"+deferred.GetId()+"-transfer"); !strings.Contains(w, "handed off by its agent") {
		t.Errorf("waiting view: the deferred step %q", w)
	}
	if w := text(t, ctx, "#waiting"); !strings.Contains(w, "test.approval") || !strings.Contains(w, "Approve…") || !strings.Contains(w, "Reject…") {
		t.Errorf("waiting view: %q", w)
	}
	screenshot(t, ctx, dir, "waiting")

	// Approve the first through the browser: the form's output goes to the
	// step, the task runs charge and succeeds.
	run(t, ctx, "open approve", chromedp.Click(chromedp.CSS("#approve-"+first.GetId()+"-approve")), chromedp.WaitVisible(chromedp.CSS("#approve-submit")))
	if in := text(t, ctx, "#json-input"); !strings.Contains(in, "o-7") {
		t.Errorf("complete page: want the task's input, got %q", in)
	}
	eval(t, ctx, `(document.querySelector('#output').value = '', 1)`)
	run(t, ctx, "type output", chromedp.SendKeys(chromedp.CSS("#output"), `{"approved": true, "by": "browser"}`))
	screenshot(t, ctx, dir, "complete-step")
	run(t, ctx, "approve", chromedp.Click(chromedp.CSS("#approve-submit")), chromedp.WaitVisible(chromedp.CSS("#task-state")))
	run(t, ctx, "task advanced", chromedp.WaitVisible(chromedp.CSS("#task-state.st-succeeded")))
	done := e.waitState(first.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	if by := stepOf(done, "approve").GetOutput().GetStructValue().GetFields()["by"].GetStringValue(); by != "browser" || stepOf(done, "charge").GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Errorf("after the approval: approve's output by %q, charge %v", by, stepOf(done, "charge").GetState())
	}
	if h := text(t, ctx, "#history"); !strings.Contains(h, "completed from outside") {
		t.Errorf("history: want the completion, got %q", h)
	}
	screenshot(t, ctx, dir, "task-approved")
	run(t, ctx, "waiting after", chromedp.Navigate(e.url+"/waiting"), chromedp.WaitVisible(chromedp.CSS("#wait-"+second.GetId()+"-approve")))
	if n := eval(t, ctx, `document.querySelectorAll('#waiting tbody tr.row').length`); n != 2 {
		t.Errorf("waiting view after the approval: %d rows, want 2 (the other approval, the deferred step)", n)
	}

	// The task pages say what each waits for.
	for _, c := range []struct {
		id, shot, sel, want string
	}{
		{second.GetId(), "task-waiting", "#wait-approval-approve", "waiting for approval since"},
		{sleeper.GetId(), "task-sleeping", "#wait-sleep-cool_off", "sleeping until"},
		{delayed.GetId(), "task-delayed", "#wait-start", "waiting to start at"},
		{deferred.GetId(), "task-deferred", "#wait-deferred-transfer", "handed off by its agent since"},
		{held.GetId(), "task-held", "#wait-queue-erp_call", "waiting: test.hold is at its limit 1/1"}, // last: its steps are checked below
	} {
		run(t, ctx, "open "+c.shot, chromedp.Navigate(e.url+"/tasks/"+c.id), chromedp.WaitVisible(chromedp.CSS(c.sel)))
		if got := text(t, ctx, c.sel); !strings.Contains(got, c.want) {
			t.Errorf("%s: want %q, got %q", c.shot, c.want, got)
		}
		screenshot(t, ctx, dir, c.shot)
	}
	if tl := text(t, ctx, "#steps"); !strings.Contains(tl, "test.hold is at its limit 1/1") {
		t.Errorf("held task's steps: want the reason under the step, got %q", tl)
	}

	// The queues page: set a limit with the form, pause a type with its
	// button (after the confirmation dialog).
	run(t, ctx, "queues", chromedp.Navigate(e.url+"/queues"), chromedp.WaitVisible(chromedp.CSS(`tr[id="queue-payments.charge"]`)))
	run(t, ctx, "limit form", chromedp.Click(chromedp.CSS(`tr[id="queue-payments.charge"] details.limit summary`)),
		chromedp.SendKeys(chromedp.CSS(`form[id="limit-payments.charge"] input[name=max_running]`), "10"),
		chromedp.SendKeys(chromedp.CSS(`form[id="limit-payments.charge"] input[name=rate]`), "5"),
		chromedp.SendKeys(chromedp.CSS(`form[id="limit-payments.charge"] input[name=burst]`), "10"),
		chromedp.Submit(chromedp.CSS(`form[id="limit-payments.charge"]`)), chromedp.WaitVisible(chromedp.CSS("#queue-message")))
	if m := text(t, ctx, "#queue-message"); !strings.Contains(m, "max running 10, 5/s, burst 10") {
		t.Errorf("limit set: %q", m)
	}
	run(t, ctx, "pause", chromedp.Click(chromedp.CSS(`button[id="pause-inventory.reserve"]`)), chromedp.WaitVisible(chromedp.CSS(`button[id="resume-inventory.reserve"]`)))
	row := func(typ string) string { return text(t, ctx, `tr[id="queue-`+typ+`"]`) }
	if r := row("payments.charge"); !strings.Contains(r, "0/10") || !strings.Contains(r, "5/s, burst 10") {
		t.Errorf("payments.charge row: %q", r)
	}
	if r := row("test.hold"); !strings.Contains(r, "1/1") {
		t.Errorf("test.hold row: %q", r)
	}
	if r := row("test.nobody"); !strings.Contains(r, "paused") || !strings.Contains(r, "no agent") {
		t.Errorf("test.nobody row: %q", r)
	}
	if r := row("inventory.reserve"); !strings.Contains(r, "paused") {
		t.Errorf("inventory.reserve row: %q", r)
	}
	screenshot(t, ctx, dir, "queues")
	run(t, ctx, "dark theme", chromedp.Click(chromedp.CSS("#theme-toggle")))
	poll(t, ctx, "dark theme applied", `document.documentElement.getAttribute('data-theme') === 'dark'`, 30*time.Second)
	screenshot(t, ctx, dir, "queues-dark")
	run(t, ctx, "waiting dark", chromedp.Navigate(e.url+"/waiting"), chromedp.WaitVisible(chromedp.CSS("#waiting")))
	screenshot(t, ctx, dir, "waiting-dark")
	run(t, ctx, "task waiting dark", chromedp.Navigate(e.url+"/tasks/"+second.GetId()), chromedp.WaitVisible(chromedp.CSS("#waits")))
	screenshot(t, ctx, dir, "task-waiting-dark")
	run(t, ctx, "light theme", chromedp.Click(chromedp.CSS("#theme-toggle")))
	poll(t, ctx, "light theme applied", `document.documentElement.getAttribute('data-theme') === 'light'`, 30*time.Second)

	// Leave the live pages: their event streams end with the browser's
	// page, before the console's server stops.
	run(t, ctx, "leave", chromedp.Navigate("about:blank"))
	for _, m := range dlg.all() {
		if !strings.HasPrefix(m, "Pause ") {
			t.Errorf("a dialog opened: %q", m)
		}
	}
}

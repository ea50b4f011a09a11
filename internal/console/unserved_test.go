package console_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// unservedTask is a task whose only step has a type one edit away from
// the demo agent's payments.charge: no agent serves it.
func unservedTask() *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.unserved", Steps: []*reevev1.StepSpec{{Name: "charge", Type: "payments.chargee"}},
	}}}
}

const unservedWords = "no agent serves payments.chargee; agents serve payments.charge"

// waitServed waits, bounded, until ListAgents lists an agent serving typ
// (the demo agent connects in the background).
func (e *env) waitServed(typ string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		resp, err := e.sched.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			e.t.Fatalf("list agents: %v", err)
		}
		for _, a := range resp.GetAgents() {
			if slices.Contains(a.GetStepTypes(), typ) {
				return
			}
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("no agent serving %s is listed", typ)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The task page says, from the start, that no agent serves a queued step's
// type, naming the nearest type the namespace's agents serve; a served
// step's page says nothing of the kind.
func TestTaskPageSaysNoAgentServesAQueuedType(t *testing.T) {
	e := newEnv(t)
	e.waitServed("payments.charge")
	task := e.submit(unservedTask())
	b := e.browser()
	if _, page := b.get("/tasks/" + task.GetId()); !strings.Contains(page, `<span class="unserved"`) || !strings.Contains(page, unservedWords) {
		t.Fatalf("task page of a step no agent serves: want %q in a span of class unserved; got:\n%s", unservedWords, page)
	}
	done := e.submit(ref("demo.orders"))
	e.waitState(done.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	if _, page := b.get("/tasks/" + done.GetId()); strings.Contains(page, "no agent serves") {
		t.Fatal("task page of served steps says no agent serves one")
	}
}

// In a real browser the step's row says it too.
func TestBrowserTaskPageSaysNoAgentServes(t *testing.T) {
	ctx, _ := chrome(t, nil)
	e := newEnv(t)
	dir := shots(t)
	e.waitServed("payments.charge")
	task := e.submit(unservedTask())
	run(t, ctx, "open the task", chromedp.Navigate(e.url+"/tasks/"+task.GetId()), chromedp.WaitVisible(chromedp.CSS("#steps .unserved")))
	if got := text(t, ctx, "#steps .unserved"); got != unservedWords {
		t.Fatalf("the step's row says %q, want %q", got, unservedWords)
	}
	screenshot(t, ctx, dir, "task-unserved")
	// Leave the page: its event stream stays open while it is shown, and
	// the console's server waits for open requests when the test ends.
	run(t, ctx, "leave", chromedp.Navigate("about:blank"))
}

package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// The task page marks a running step whose agent is no longer connected,
// and shows a step error's code once even when the agent's message starts
// with it.
func TestTaskPageMarksADisconnectedAgentAndShowsTheCodeOnce(t *testing.T) {
	e := newEnv(t)
	held := &reevev1.SubmitTaskRequest{TaskId: "held-1", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.held", Steps: []*reevev1.StepSpec{{Name: "hold", Type: "test.held", Timeout: durationpb.New(time.Hour)}},
	}}}
	declined := &reevev1.SubmitTaskRequest{TaskId: "declined-1", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.declined", Steps: []*reevev1.StepSpec{{Name: "charge", Type: "test.declined"}},
	}}}
	e.submit(held)
	e.submit(declined)
	agent := testenv.ConnectRaw(t, e.addr, &reevev1.Register{AgentId: "worker-1", StepTypes: []string{"test.held", "test.declined"}, MaxConcurrentSteps: 2})
	for range 2 {
		as := agent.NextAssignment(20 * time.Second)
		if as.GetRef().GetStep() == "charge" {
			agent.Fail(as.GetRef(), &reevev1.StepError{Code: "card_declined", Message: "card_declined: insufficient funds", NonRetryable: true})
		}
	}
	e.waitState("declined-1", reevev1.TaskState_TASK_STATE_FAILED)
	b := e.browser()
	_, page := b.get("/tasks/declined-1")
	if !strings.Contains(page, "[card_declined]") || !strings.Contains(page, `<span class="error-text">insufficient funds</span>`) {
		t.Errorf("declined task page: want the code once, apart from the message; got:\n%s", page)
	}
	if _, page := b.get("/tasks/held-1"); !strings.Contains(page, "worker-1") || strings.Contains(page, `class="disconnected"`) {
		t.Fatalf("held task page while its agent is connected: want worker-1 unmarked")
	}

	agent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for gone := false; !gone; {
		resp, err := e.sched.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		gone = true
		for _, a := range resp.GetAgents() {
			gone = gone && a.GetAgentId() != "worker-1"
		}
		select {
		case <-ctx.Done():
			t.Fatal("the closed agent is still listed")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, page := b.get("/tasks/held-1"); !strings.Contains(page, `class="disconnected"`) {
		t.Fatalf("held task page after its agent disconnected: want the step marked disconnected")
	}
}

// An alert an operator's retry resolved shows as resolved, not as open and
// not as acknowledged by someone.
func TestAlertsPageShowsAResolvedAlert(t *testing.T) {
	e := newEnv(t)
	task := e.submit(failing(nil))
	e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: task.GetId(), Step: "ship"}); err != nil {
		t.Fatal(err)
	}
	_, page := e.browser().get("/alerts?all=1")
	if !strings.Contains(page, "resolved: retry_step of step") || strings.Contains(page, "acknowledged by resolved") {
		t.Fatalf("alerts page: want the first alert shown resolved by the retry; got:\n%s", page)
	}
}

// The workflow page shows each step's effective escalation, and when it is
// the default: demo.compensate's ship says none and compensates.
func TestWorkflowPageShowsTheDefaultEscalation(t *testing.T) {
	e := newEnv(t)
	_, page := e.browser().get("/workflows/demo.compensate")
	if !strings.Contains(page, "<td>compensate (default)</td>") {
		t.Fatalf("workflow page: want ship's escalation compensate (default); got:\n%s", page)
	}
}

package scheduler_test

import (
	"context"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// A saga (a workflow that declares compensations) whose step fails for good
// without saying how to escalate undoes what succeeded: the reservation's
// compensation is dispatched, the task is COMPENSATING and no alert is
// raised.
func TestSagaCompensatesByDefault(t *testing.T) {
	o := newOperatorEnv(t)
	reserve := step("reserve", "inv.reserve")
	reserve.Compensation = &reevev1.CompensationSpec{Type: "inv.release"}
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: inline(reserve, step("charge", "pay.charge", "reserve"))})
	o.succeed(t, "reserve", false)
	declined := &reevev1.StepError{Code: "card_declined", Message: "insufficient funds", NonRetryable: true}
	if ack := o.agent.Fail(o.next(t, "charge", false), declined); !ack.GetAccepted() {
		t.Fatalf("failure of charge refused: %v", ack)
	}
	o.succeed(t, "reserve", true)
	if task := o.get(t); task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v (%s), want COMPENSATED", task.GetState(), task.GetReason())
	}
	if alerts := o.alerts(t, true); len(alerts) != 0 {
		t.Fatalf("alerts %v, want none: the saga undid itself", alerts)
	}
}

// An alert's reason names the root cause, with the error's code once even
// when the agent's message repeats it; an operator's retry or compensation
// marks the failure's alert resolved, an acknowledgement made before is
// kept, and a new failure raises a new alert.
func TestAlertCarriesTheCauseAndIsResolvedByTheOperatorsAction(t *testing.T) {
	o := newOperatorEnv(t)
	submit(t, o.c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: inline(step("charge", "pay.charge"))})
	// An agent of an SDK that put the code into the message too.
	declined := &reevev1.StepError{Code: "card_declined", Message: "card_declined: insufficient funds", NonRetryable: true}
	fail := func() {
		t.Helper()
		if ack := o.agent.Fail(o.next(t, "charge", false), declined); !ack.GetAccepted() {
			t.Fatalf("failure of charge refused: %v", ack)
		}
		if task := o.get(t); task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
			t.Fatalf("task %v, want FAILED", task.GetState())
		}
	}
	retry := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := o.retry("charge")(ctx); err != nil {
			t.Fatal(err)
		}
	}

	fail()
	const want = `step "charge" failed permanently: card_declined: insufficient funds`
	open := o.alerts(t, false)
	if len(open) != 1 || open[0].GetReason() != want || open[0].GetStep() != "charge" {
		t.Fatalf("open alerts %v, want one with reason %q", open, want)
	}
	retry()
	if open := o.alerts(t, false); len(open) != 0 {
		t.Fatalf("open alerts after the retry %v, want none", open)
	}

	fail()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	second := o.alerts(t, false)
	if len(second) != 1 {
		t.Fatalf("open alerts after the second failure %v, want one", second)
	}
	if _, err := o.sup.AckAlert(ctx, &reevev1.AckAlertRequest{AlertId: second[0].GetId(), AcknowledgedBy: "bob"}); err != nil {
		t.Fatal(err)
	}
	retry()

	fail()
	if _, err := o.sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "t-1"}); err != nil {
		t.Fatal(err)
	}
	all := o.alerts(t, true)
	wantAlerts := []struct{ by, resolution string }{
		{"operator", `retry_step of step "charge" by operator`},
		{"bob", ""}, // acknowledged before the retry: kept
		{"operator", "compensate_task by operator"},
	}
	if len(all) != len(wantAlerts) {
		t.Fatalf("alerts %v, want %d", all, len(wantAlerts))
	}
	for i, a := range all {
		w := wantAlerts[i]
		if !a.GetAcknowledged() || a.GetAcknowledgedBy() != w.by || a.GetAckTime() == nil || a.GetResolution() != w.resolution {
			t.Errorf("alert %d: acknowledged %v by %q at %v, resolution %q; want by %q, resolution %q", i, a.GetAcknowledged(), a.GetAcknowledgedBy(), a.GetAckTime(), a.GetResolution(), w.by, w.resolution)
		}
		if (a.GetResolveTime() != nil) != (w.resolution != "") {
			t.Errorf("alert %d: resolve_time %v with resolution %q", i, a.GetResolveTime(), a.GetResolution())
		}
	}
}

func (o *operatorEnv) alerts(t *testing.T, all bool) []*reevev1.Alert {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := o.sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{IncludeAcknowledged: all})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAlerts()
}

package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Priority × max_running (issue 36): with the limit binding, a
// high-priority step queued behind many low-priority ones of its type gets
// the next freed slot — also when the slot is freed by the result of a
// low-priority task whose next step is of the same type (the result's
// write claims nothing while a higher priority waits). Two schedulers:
// the high-priority task is submitted to the other one.
func TestMaxRunningFreedSlotGoesToHighestPriority(t *testing.T) {
	env, s, c := newEnv(t)
	s2 := env.StartScheduler("")
	q, q2 := queues(t, s), queues(t, s2)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 1})
	waitApplied(t, q, "erp", 1)
	waitApplied(t, q2, "erp", 1)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "low0", Priority: 5, Workflow: inline(step("x", "erp"), step("y", "erp", "x"))})
	first := a.NextAssignment(wait)
	for i := range 4 {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("low%d", i+1), Priority: 5, Workflow: inline(step("x", "erp"))})
	}
	submit(t, s2.Client(t), &reevev1.SubmitTaskRequest{TaskId: "high", Priority: 1, Workflow: inline(step("x", "erp"))})
	queuedDepth(t, c, "erp", 5)
	a.Quiet(100 * time.Millisecond)
	a.Succeed(first.GetRef(), nil)
	var got []string
	for range 6 {
		got = append(got, runOne(t, a))
	}
	if got[0] != "high" {
		t.Fatalf("dispatch order after the first result %v; want high first", got)
	}
	if want := "[high low1 low2 low3 low4 low0]"; fmt.Sprint(got) != want {
		t.Errorf("dispatch order %v; want %s (FIFO within a priority: low0's second step became ready last)", got, want)
	}
	waitFlowKeys(t, env, 0, "all ended")
	verifyClean(t, env)
}

// Fairness × a step's concurrency key: tenant A's steps all share one key
// value (max 1), so all but one wait parked; tenant B's steps, of the same
// type, run meanwhile, and A's go on one at a time in order.
func TestFairnessWhileOneKeyIsParked(t *testing.T) {
	env, s, c := newEnv(t)
	sp := step("x", "erp")
	sp.Concurrency = &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1}
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{sp}}}
	for i := range 20 {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("a%02d", i), FairnessKey: "A", Workflow: wf,
			Input: testenv.Value(t, map[string]any{"customer": "c1"})})
	}
	queuedDepth(t, c, "erp", 20)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	held := a.NextAssignment(wait)
	if held.GetRef().GetTaskId() != "a00" {
		t.Fatalf("assigned %v; want a00", held.GetRef())
	}
	a.Quiet(200 * time.Millisecond)
	for i := range 3 {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("b%d", i), FairnessKey: "B", Workflow: wf,
			Input: testenv.Value(t, map[string]any{"customer": fmt.Sprintf("b%d", i)})})
	}
	for range 3 {
		as := a.NextAssignment(wait)
		if as.GetRef().GetTaskId()[0] != 'b' {
			t.Fatalf("assigned %v while A's key is full; want B's", as.GetRef())
		}
		a.Succeed(as.GetRef(), nil)
	}
	a.Succeed(held.GetRef(), nil)
	for i := 1; i < 20; i++ {
		if id := runOne(t, a); id != fmt.Sprintf("a%02d", i) {
			t.Fatalf("assigned %s; want a%02d (A's, in order)", id, i)
		}
	}
	waitFlowKeys(t, env, 0, "all ended")
	verifyClean(t, env)
}

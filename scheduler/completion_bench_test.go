package scheduler_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// TestCompletionRoundTripBench measures a completion's round trip, unloaded:
// N tasks (N from REEVE_BENCH_COMPLETIONS; skipped without it) whose first
// step waits for a completion from outside and whose second an idle raw
// agent runs; one at a time, the time from CompleteStep (by name) being
// sent to the agent receiving the next step's assignment. It reports the
// p50, p99 and max (target: p99 ≤ 20 ms, issue 35).
//
//	REEVE_BENCH_COMPLETIONS=2000 go test ./scheduler/ -run TestCompletionRoundTripBench -v -timeout 10m
func TestCompletionRoundTripBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_COMPLETIONS"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_COMPLETIONS to run the completion round-trip benchmark")
	}
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("bench", 1, "ship"))
	wf := approvalFlow(time.Hour, nil).InlineWorkflow
	wf.Steps = wf.Steps[1:] // approve -> ship
	wf.Steps[0].DependsOn = nil
	for i := range n {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("rt-%06d", i), Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}})
	}
	took := make([]time.Duration, 0, n)
	for i := range n {
		id := fmt.Sprintf("rt-%06d", i)
		began := time.Now()
		if _, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: id, Step: "approve", Outcome: output(true)}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		as := agent.NextAssignment(wait)
		took = append(took, time.Since(began))
		if as.GetRef().GetTaskId() != id {
			t.Fatalf("assignment %v, want task %s", as.GetRef(), id)
		}
		if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
			t.Fatalf("%s: %v", id, ack)
		}
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("completion round trip (CompleteStep -> next step's assignment), %d completions: p50 %v, p99 %v, max %v",
		n, q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
}

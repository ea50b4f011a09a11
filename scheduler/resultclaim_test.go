package scheduler_test

import (
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// With room on an agent, the result of a step claims the next one in the
// same write: a three-step chain costs four record writes (created
// claimed, then one per result) instead of six, no step enters the ready
// queue, and each next step's assignment carries the output it depends on.
// When the only agent is full (its one slot is freed only once the result
// is written), the next step goes through the ready queue as before.
func TestResultClaimsTheNextStep(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int32
		writes   int64
	}{
		{"room", 2, 4},
		{"full", 1, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			s := env.StartScheduler("")
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a1", tc.capacity, "echo"))
			submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t1", Workflow: inline(
				step("a", "echo"), step("b", "echo", "a"), step("c", "echo", "b"))})
			for i, name := range []string{"a", "b", "c"} {
				as := agent.NextAssignment(wait)
				if got := as.GetRef().GetStep(); got != name {
					t.Fatalf("assignment %d: step %q, want %q", i, got, name)
				}
				if i > 0 {
					prev := []string{"a", "b"}[i-1]
					if out := as.GetDependencyOutputs()[prev]; out.GetStructValue().GetFields()["n"].GetNumberValue() != float64(i) {
						t.Fatalf("step %s: dependency output of %s = %v, want n=%d", name, prev, out, i)
					}
				}
				if ack := agent.Succeed(as.GetRef(), map[string]any{"n": i + 1}); !ack.GetAccepted() {
					t.Fatalf("result of %s refused: %v", name, ack)
				}
				if tc.name == "room" {
					if v, r := recordVersion(t, env, "t1"), readyKeys(t, env); v != int64(i+2) || r != 0 {
						t.Fatalf("after the result of %s: record written %d times, %d ready keys; want %d and 0", name, v, r, i+2)
					}
				}
			}
			if final := testenv.WaitTask(t, c, "default", "t1", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
				t.Fatalf("t1: %v", final.GetState())
			}
			if v := recordVersion(t, env, "t1"); v != tc.writes {
				t.Fatalf("record written %d times, want %d", v, tc.writes)
			}
		})
	}
}

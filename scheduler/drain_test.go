package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// An agent that obeys Drain but knows only one scheduler address comes
// straight back to the draining scheduler. A result it reports there once
// the scheduler has stopped working must get no answer (it was answered
// CANCELED, and agents drop answered results): unanswered, the agent keeps
// it and delivers it through another scheduler.
func TestResultReportedToAStoppedSchedulerIsNotLost(t *testing.T) {
	env, s1, c := newEnv(t)
	s2 := env.StartScheduler("")
	slow := testenv.ConnectRaw(t, s1.Addr, register("slow", 1, "other")) // ignores Drain
	a := testenv.ConnectRaw(t, s1.Addr, register("mover", 1, "x"))
	task := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))})
	as := a.NextAssignment(wait)

	stopped := make(chan struct{})
	go func() { s1.Stop(); close(stopped) }()
	for a.Next(wait).GetDrain() == nil {
	}
	a.Close()
	reg := register("mover", 1, "x")
	reg.Running = append(reg.Running, as.GetRef())
	back := testenv.ConnectRaw(t, s1.Addr, reg)

	// s1 stops working after its drain timeout; then its gRPC server stops
	// taking new streams.
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		probe, err := testenv.TryConnectRaw(t, s1.Addr, register(fmt.Sprintf("probe-%d", i), 1, "other"))
		if status.Code(err) == codes.Unavailable {
			break
		}
		if err == nil {
			probe.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("s1 still takes streams: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	back.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef(), Outcome: &reevev1.StepResult_Output{Output: testenv.Value(t, map[string]any{"ok": true})}}}})
	if m, ok := back.Recv(time.Second); ok && m.GetResultAck() != nil {
		t.Fatalf("a stopped scheduler answered the result %v: the agent would drop it", m.GetResultAck())
	}
	back.Close()
	slow.Close()
	<-stopped

	moved := testenv.ConnectRaw(t, s2.Addr, reg)
	if ack := moved.Succeed(as.GetRef(), map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("result through the other scheduler refused: %v", ack)
	}
	if got := getTask(t, s2.Client(t), task.GetId()); got.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %s, want SUCCEEDED", got.GetState())
	}
}

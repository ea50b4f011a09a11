package scheduler_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// forgetfulTask submits a one-step task whose step's complete-by is an hour
// away and returns its first assignment, taken by the raw agent first.
func forgetfulTask(t *testing.T, c reevev1.SchedulerServiceClient, first *testenv.RawAgent, id string) *reevev1.StepAssignment {
	t.Helper()
	long := step("a", "x")
	long.Timeout = durationpb.New(time.Hour)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(long)})
	return first.NextAssignment(wait)
}

// An agent killed mid-step reconnects with the same id without the attempt
// in Register.running: the attempt is recovered at once — its next attempt
// reaches the agent within seconds, not at the complete-by an hour later —
// and the history says why.
func TestReconnectWithoutTheAttemptRecoversItAtOnce(t *testing.T) {
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s})
	first := testenv.ConnectRaw(t, s.Addr, register("forgetful", 1, "x"))
	as := forgetfulTask(t, c, first, "gone")
	first.Close() // the process died; its stream may or may not be seen to end before the next Register

	again := testenv.ConnectRaw(t, s.Addr, register("forgetful", 1, "x"))
	next := again.NextAssignment(wait)
	if next.GetRef().GetTaskId() != "gone" || next.GetRef().GetAttempt() != as.GetRef().GetAttempt()+1 {
		t.Fatalf("after the reconnect the agent got %v, want attempt %d of the same step", next.GetRef(), as.GetRef().GetAttempt()+1)
	}
	if ack := again.Succeed(next.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result of the new attempt refused: %v", ack)
	}
	final := testenv.WaitTask(t, c, "default", "gone", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v, want SUCCEEDED", final.GetState())
	}
	if !hasEvent(final, "step.agent_forgot") {
		t.Fatalf("history lacks step.agent_forgot: %v", final.GetHistory())
	}
}

// The same agent reconnecting with the attempt listed keeps it: its result
// is accepted, and nothing was expired — also when the new stream
// registered while the old one was still open.
func TestReconnectListingTheAttemptKeepsIt(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		name := "after the old stream"
		if overlap {
			name = "while the old stream is open"
		}
		t.Run(name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			s := testenv.New(t).StartScheduler("", scheduler.WithMeterProvider(mp))
			c := s.Client(t)
			first := testenv.ConnectRaw(t, s.Addr, register("steady", 1, "x"))
			as := forgetfulTask(t, c, first, "kept")
			if !overlap {
				first.Close()
			}
			reg := register("steady", 1, "x")
			reg.Running = []*reevev1.StepRef{as.GetRef()}
			again := testenv.ConnectRaw(t, s.Addr, reg)
			if overlap {
				first.Close()
			}
			// Check once the scheduler saw the old stream end: one stream
			// of the agent left.
			deadline := time.Now().Add(wait)
			for testenv.GaugeSum(t, reader, "reeve.agents.connected", nil) != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the old stream's end was not seen")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if ack := again.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
				t.Fatalf("result of the listed attempt refused: %v", ack)
			}
			final := testenv.WaitTask(t, c, "default", "kept", wait)
			if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || hasEvent(final, "step.agent_forgot") {
				t.Fatalf("task %v, history %v; want SUCCEEDED without step.agent_forgot", final.GetState(), final.GetHistory())
			}
		})
	}
}

// A second stream of the agent that registers without the attempt while
// the first is still open: when the first ends, the attempt is expired at
// once (its complete-by moves to now), without a later Register.
func TestNewerStreamWithoutTheAttemptExpiresItWhenTheOldEnds(t *testing.T) {
	_, s, c := newEnv(t)
	first := testenv.ConnectRaw(t, s.Addr, register("twice", 1, "x"))
	as := forgetfulTask(t, c, first, "old")
	testenv.ConnectRaw(t, s.Addr, register("twice", 1, "x"))
	first.Close()
	deadline := time.Now().Add(wait)
	for {
		st := stepOf(getTask(t, c, "old"), "a")
		if st.GetAttempt() == as.GetRef().GetAttempt() && st.GetCompleteBy().AsTime().Before(as.GetCompleteBy().AsTime().Add(-30*time.Minute)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt not expired: step %v attempt %d complete-by %v", st.GetState(), st.GetAttempt(), st.GetCompleteBy().AsTime())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hasEvent(t *reevev1.Task, kind string) bool {
	for _, e := range t.GetHistory() {
		if e.GetKind() == kind {
			return true
		}
	}
	return false
}

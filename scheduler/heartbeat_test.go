package scheduler_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Heartbeats are still required after the agent reconnects: an execution it
// lists in Register.running and then stops heartbeating is expired (its
// complete-by moved to now) like one on its original stream.
func TestHeartbeatWatchedAfterReconnect(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("hb", 1, "x"))
	long := step("a", "x")
	long.Timeout = durationpb.New(time.Minute)
	long.HeartbeatTimeout = durationpb.New(300 * time.Millisecond)
	task := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(long)})
	as := a.NextAssignment(wait)
	a.Close()

	reg := register("hb", 1, "x")
	reg.Running = append(reg.Running, as.GetRef())
	testenv.ConnectRaw(t, s.Addr, reg) // and never heartbeats
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: task.GetId()})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		st := stepOf(resp.GetTask(), "a")
		if st.GetAttempt() != 1 || st.GetCompleteBy().AsTime().Before(as.GetCompleteBy().AsTime()) {
			return // expired: the supervisor takes it from here
		}
		if time.Now().After(deadline) {
			t.Fatalf("missed heartbeats after a reconnect went unnoticed: step %v, complete-by %v", st.GetState(), st.GetCompleteBy().AsTime())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

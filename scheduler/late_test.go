package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// No supervisor runs, so nothing recovers the expired attempts: the
// scheduler alone judges lateness. A result more than LateResultGrace past
// its complete-by is refused and changes nothing; one within the grace is
// accepted.
func TestResultPastCompleteByIsRefused(t *testing.T) {
	const timeout = 300 * time.Millisecond
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("late", 2, "x"))
	st := step("a", "x")
	st.Timeout = durationpb.New(timeout)
	late := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "late", Workflow: inline(st)})
	lateAs := a.NextAssignment(wait)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "in-time", Workflow: inline(st)})
	inTimeAs := a.NextAssignment(wait)

	// Within the grace: accepted.
	waitUntil(inTimeAs.GetCompleteBy().AsTime().Add(scheduler.LateResultGrace / 4))
	if ack := a.Succeed(inTimeAs.GetRef(), map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("result %v within the grace refused: %v", scheduler.LateResultGrace/4, ack)
	}

	// Past it: refused, naming the complete-by.
	waitUntil(lateAs.GetCompleteBy().AsTime().Add(scheduler.LateResultGrace + 200*time.Millisecond))
	ack := a.Succeed(lateAs.GetRef(), map[string]any{"ok": true})
	if ack.GetAccepted() || codes.Code(ack.GetStatus().GetCode()) != codes.FailedPrecondition || !strings.Contains(ack.GetStatus().GetMessage(), "after its complete-by") {
		t.Fatalf("late result ack %v, want FAILED_PRECONDITION naming the complete-by", ack)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: late.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if x := stepOf(got.GetTask(), "a"); x.GetState() != reevev1.StepState_STEP_STATE_RUNNING || x.GetOutput() != nil || x.GetAttempt() != 1 {
		t.Fatalf("the late result changed the step: %v", x)
	}
}

// waitUntil blocks until the wall clock passes at (bounded: at is at most a
// few seconds away here).
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}

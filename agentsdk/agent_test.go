package agentsdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 20 * time.Second

// runAgent runs a on its own until the test ends and returns a channel with
// Run's result.
func runAgent(t *testing.T, a *agentsdk.Agent) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once atomic.Bool
	stop = func() error {
		if once.Swap(true) {
			return nil
		}
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(wait):
			t.Fatal("Run did not return after its ctx was canceled")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newAgent(t *testing.T, addrs []string, opts ...agentsdk.Option) *agentsdk.Agent {
	t.Helper()
	opts = append([]agentsdk.Option{agentsdk.WithLogger(testenv.Logger()), agentsdk.WithReconnectBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	a, err := agentsdk.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func submit(t *testing.T, c reevev1.SchedulerServiceClient, id string, steps ...*reevev1.StepSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{
		TaskId: id, Input: testenv.Value(t, map[string]any{"order_id": "o-1"}),
		Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "sdk", Steps: steps}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func spec(name, typ string, timeout time.Duration, deps ...string) *reevev1.StepSpec {
	return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(timeout)}
}

func TestHandlersRunStepsWithInputsAndOutputs(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	keys := make(chan string, 2)
	a.Handle("reserve", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		var in struct {
			OrderID string `json:"order_id"`
		}
		if err := st.Input(&in); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		keys <- st.IdempotencyKey
		return map[string]string{"reservation": "res-" + in.OrderID}, nil
	})
	a.Handle("charge", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		var res struct{ Reservation string }
		if err := st.DependencyOutput("reserve", &res); err != nil {
			return nil, err
		}
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("handler ctx has no deadline")
		}
		return map[string]string{"charged_for": res.Reservation}, nil
	})
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "ok", spec("reserve", "reserve", 10*time.Second), spec("charge", "charge", 10*time.Second, "reserve"))
	final := testenv.WaitTask(t, c, "default", "ok", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v: %v", final.GetState(), final.GetReason())
	}
	if got := final.GetSteps()[1].GetOutput().GetStructValue().GetFields()["charged_for"].GetStringValue(); got != "res-o-1" {
		t.Fatalf("charge output %q, want res-o-1", got)
	}
	if key := <-keys; key != final.GetSteps()[0].GetIdempotencyKey() {
		t.Fatalf("handler saw idempotency key %q, task has %q", key, final.GetSteps()[0].GetIdempotencyKey())
	}
}

func TestErrorsMapToStepErrors(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	a.Handle("permanent", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		return nil, agentsdk.Permanent(errors.New("card declined"))
	})
	a.Handle("coded", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		return nil, fmt.Errorf("charge: %w", &agentsdk.Error{Code: "insufficient_funds", Message: "no money"})
	})
	a.Handle("panics", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		if st.Attempt == 1 {
			panic("boom")
		}
		return "recovered", nil
	})
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "perm", spec("x", "permanent", 10*time.Second))
	coded := spec("x", "coded", 10*time.Second)
	coded.RetryPolicy = &reevev1.RetryPolicy{NonRetryableErrorCodes: []string{"insufficient_funds"}}
	submit(t, c, "coded", coded)
	retried := spec("x", "panics", 10*time.Second)
	retried.RetryPolicy = &reevev1.RetryPolicy{InitialBackoff: durationpb.New(10 * time.Millisecond)}
	submit(t, c, "panic", retried)

	// The code is a field of its own, not repeated in the message.
	for _, tc := range []struct{ id, code, message string }{{"perm", "", "card declined"}, {"coded", "insufficient_funds", "charge: no money"}} {
		final := testenv.WaitTask(t, c, "default", tc.id, wait)
		x := final.GetSteps()[0]
		if final.GetState() != reevev1.TaskState_TASK_STATE_FAILED || x.GetAttempt() != 1 || x.GetLastError().GetCode() != tc.code || x.GetLastError().GetMessage() != tc.message {
			t.Fatalf("%s: task %v attempt %d error %v, want FAILED after one attempt with code %q, message %q", tc.id, final.GetState(), x.GetAttempt(), x.GetLastError(), tc.code, tc.message)
		}
	}
	final := testenv.WaitTask(t, c, "default", "panic", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetFailureCount() != 1 {
		t.Fatalf("panic task %v after %d failures, want a retry to succeed", final.GetState(), final.GetSteps()[0].GetFailureCount())
	}
}

// Past its complete-by an agent sends nothing, not even an error.
func TestNoResultAfterCompleteBy(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	returned := make(chan struct{})
	a.Handle("slow", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a handler that overruns its deadline a little
		close(returned)
		return "too late", nil
	})
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "late", spec("x", "slow", 300*time.Millisecond))
	select {
	case <-returned:
	case <-time.After(wait):
		t.Fatal("handler never returned")
	}
	// Give a result, were one sent, ample time to be recorded.
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "late"})
	if err != nil {
		t.Fatal(err)
	}
	x := got.GetTask().GetSteps()[0]
	if x.GetState() != reevev1.StepState_STEP_STATE_RUNNING || x.GetFailureCount() != 0 || x.GetOutput() != nil {
		t.Fatalf("step %v failures %d output %v: a late result was sent", x.GetState(), x.GetFailureCount(), x.GetOutput())
	}
}

func TestCancelTaskCancelsHandlerContext(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	started, canceled := make(chan struct{}), make(chan struct{})
	a.Handle("long", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		close(started)
		<-ctx.Done()
		close(canceled)
		return nil, ctx.Err()
	})
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "c", spec("x", "long", time.Minute))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "c"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-canceled:
	case <-time.After(wait):
		t.Fatal("handler ctx not canceled after CancelTask")
	}
}

// The scheduler dies while a step runs; the agent moves to the other
// scheduler and delivers the result there.
func TestResultSurvivesSchedulerCrash(t *testing.T) {
	env := testenv.New(t)
	s1 := env.StartScheduler("")
	a := newAgent(t, []string{s1.Addr})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		started <- struct{}{}
		<-release
		return "done", nil
	})
	runAgent(t, a)
	c := s1.Client(t)
	submit(t, c, "crash", spec("x", "work", time.Minute))
	<-started

	s1.Kill()
	s2 := env.StartScheduler(s1.Addr) // same address: the agent's only one
	close(release)
	final := testenv.WaitTask(t, s2.Client(t), "default", "crash", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v attempt %d, want SUCCEEDED on attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

// Draining: a gracefully stopping scheduler moves its agents to the next
// address, where running steps report.
func TestDrainMovesAgentToNextScheduler(t *testing.T) {
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	a := newAgent(t, []string{s1.Addr, s2.Addr})
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		started <- struct{}{}
		<-release
		return "done", nil
	})
	runAgent(t, a)
	submit(t, s2.Client(t), "d1", spec("x", "work", time.Minute))
	<-started
	// The agent starts at a random address: drain whichever scheduler
	// dispatched the step, and watch through the other.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	running, err := s2.Client(t).GetTask(ctx, &reevev1.GetTaskRequest{Namespace: "default", TaskId: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	from, other := s1, s2
	if running.GetTask().GetSteps()[0].GetLockedByScheduler() == s2.ID() {
		from, other = s2, s1
	}
	go from.Stop() // sends Drain, waits for the agent to leave
	close(release)
	final := testenv.WaitTask(t, other.Client(t), "default", "d1", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED on attempt 1 (the result delivered through the other scheduler)", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
	submit(t, other.Client(t), "d2", spec("x", "work", time.Minute))
	if final := testenv.WaitTask(t, other.Client(t), "default", "d2", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task after drain %v", final.GetState())
	}
}

// Run's ctx ending stops new work, finishes the running step, delivers its
// result and returns nil.
func TestShutdownFinishesRunningSteps(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	started := make(chan struct{})
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		close(started)
		time.Sleep(200 * time.Millisecond) // still working when shutdown begins
		return "finished", nil
	})
	stop := runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "sd", spec("x", "work", time.Minute))
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v, want nil after a graceful shutdown", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "sd"})
	if err != nil || got.GetTask().GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v %v, want SUCCEEDED before Run returned", got.GetTask().GetState(), err)
	}
}

func TestRefusedRegistrationIsFatal(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	a.Handle("not a valid type!", func(ctx context.Context, st *agentsdk.Step) (any, error) { return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := a.Run(ctx)
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument && status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Run returned %v, want the InvalidArgument refusal", err)
	}
}

// A handler that heartbeats keeps a long step alive past its heartbeat
// timeout; the scheduler's liveness check and the supervisor leave it alone.
func TestHeartbeatKeepsLongStepAlive(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	a := newAgent(t, []string{s.Addr})
	a.Handle("long", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		for range 15 { // 1.5s of work, three heartbeat timeouts
			if err := st.Heartbeat(ctx); err != nil {
				return nil, err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return "done", nil
	})
	runAgent(t, a)
	c := s.Client(t)
	long := spec("x", "long", time.Minute)
	// Wide enough that a loaded machine running -race does not miss a beat.
	long.HeartbeatTimeout = durationpb.New(500 * time.Millisecond)
	submit(t, c, "hb", long)
	final := testenv.WaitTask(t, c, "default", "hb", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetAttempt() != 1 {
		t.Fatalf("task %v at attempt %d, want SUCCEEDED on attempt 1", final.GetState(), final.GetSteps()[0].GetAttempt())
	}
}

// A long non-ASCII error message is cut on a character boundary: cut in the
// middle of one, gRPC refuses to send it, the stream breaks and the result
// is never delivered.
func TestLongNonASCIIErrorIsDelivered(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	msg := "\xff" + strings.Repeat("é", 3000) // 6,001 bytes, the first invalid UTF-8
	a.Handle("fails", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		return nil, agentsdk.Permanent(errors.New(msg))
	})
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "utf8", spec("x", "fails", 10*time.Second))
	final := testenv.WaitTask(t, c, "default", "utf8", wait)
	got := final.GetSteps()[0].GetLastError().GetMessage()
	if final.GetState() != reevev1.TaskState_TASK_STATE_FAILED || !utf8.ValidString(got) || len(got) > 4096 || !strings.HasPrefix(strings.ToValidUTF8(msg, "\uFFFD"), got) || len(got) < 4090 {
		t.Fatalf("task %v, error message of %d bytes (valid UTF-8: %v), want FAILED with the message's first 4096 bytes cut on a character boundary",
			final.GetState(), len(got), utf8.ValidString(got))
	}
}

// An agent cut off from its only scheduler for longer than a step's
// reassign_after_disconnect stops that step's handler (the scheduler that saw
// the stream end re-dispatches it then, and its result would be refused); a
// step without it keeps running.
func TestCutOffAgentStopsStepsThatAreReassigned(t *testing.T) {
	const grace = 300 * time.Millisecond
	env := testenv.New(t)
	s := env.StartScheduler("")
	// Its scheduler is gone for good: the plain step's result is never
	// acknowledged, so the agent's shutdown gives up on it quickly.
	a := newAgent(t, []string{s.Addr}, agentsdk.WithShutdownTimeout(100*time.Millisecond))
	started, canceled := make(chan string, 2), make(chan string, 2)
	release := make(chan struct{})
	a.Handle("long", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		started <- st.TaskID
		select {
		case <-ctx.Done():
			canceled <- st.TaskID
			return nil, ctx.Err()
		case <-release:
			return nil, nil
		}
	})
	runAgent(t, a)
	t.Cleanup(func() { close(release) }) // runs before the agent is stopped
	c := s.Client(t)
	graced := spec("x", "long", time.Minute)
	graced.ReassignAfterDisconnect = durationpb.New(grace)
	submit(t, c, "graced", graced)
	submit(t, c, "plain", spec("x", "long", time.Minute))
	for range 2 {
		select {
		case <-started:
		case <-time.After(wait):
			t.Fatal("steps not started")
		}
	}
	cut := time.Now()
	s.Kill() // the agent's only scheduler: it stays cut off
	select {
	case id := <-canceled:
		if id != "graced" {
			t.Fatalf("%s canceled, want graced", id)
		}
		if d := time.Since(cut); d < grace {
			t.Fatalf("canceled %v after the cut, before the %v grace", d, grace)
		}
	case <-time.After(wait):
		t.Fatal("graced step not canceled while cut off")
	}
	select {
	case id := <-canceled:
		t.Fatalf("%s canceled too: only a step with reassign_after_disconnect is", id)
	case <-time.After(3 * grace):
	}
}

package supervisor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
)

// unavailableWithin is how fast a client must learn that etcd is down: the
// store bounds every etcd request by 5s.
const unavailableWithin = 6 * time.Second

// etcd stops for longer than the supervisor's session TTL and comes back on
// the same address. Meanwhile clients get UNAVAILABLE within the store's
// request timeout, an SDK agent finishes its step, and nothing crashes. When
// etcd is back, everything resumes by itself: the result recorded during the
// outage lands, the supervisor leads again and recovers a step that expired
// while etcd was down, and the dispatcher hands out new work.
func TestEtcdOutageEveryComponentResumes(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	sup := env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	waitFor(t, "a leader", sup.Leading)

	// An SDK agent whose "held" step finishes only when the test says so,
	// and a raw agent that never answers its "silent" step.
	release := make(chan struct{})
	var ran atomic.Int32
	agent, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID("sdk"), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	agent.Handle("held", func(ctx context.Context, _ *agentsdk.Step) (any, error) {
		ran.Add(1)
		select {
		case <-release:
			return map[string]string{"done": "during the outage"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	agent.Handle("quick", func(context.Context, *agentsdk.Step) (any, error) { return nil, nil })
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(actx) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })
	silent := testenv.ConnectRaw(t, s.Addr, register("silent", "silent"))

	submit(t, c, "held", step("x", "held", 30*time.Second))
	submit(t, c, "expires", step("x", "silent", time.Second))
	waitFor(t, "the held step to start", func() bool { return ran.Load() == 1 })
	first := silent.NextAssignment(wait)

	env.Etcd.Stop()
	outage := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"SubmitTask", func() error {
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "during",
				Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Steps: []*reevev1.StepSpec{step("x", "quick", time.Second)}}}})
			return err
		}},
		{"GetTask", func() error { _, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "held"}); return err }},
		{"ListTasks", func() error { _, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{}); return err }},
	}
	// Concurrently, so that the outage stays short of the held step's
	// complete-by.
	errs := make(chan error, len(calls))
	for _, call := range calls {
		go func() {
			start := time.Now()
			err := call.call()
			if took := time.Since(start); status.Code(err) != codes.Unavailable || took > unavailableWithin {
				errs <- fmt.Errorf("%s with etcd down: %v after %v, want UNAVAILABLE within %v", call.name, err, took, unavailableWithin)
				return
			}
			t.Logf("%s: UNAVAILABLE after %v", call.name, time.Since(start).Round(time.Millisecond))
			errs <- nil
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(release) // the SDK agent reports its result while etcd is down
	// Stay down past the supervisor's 2s session TTL and the silent step's
	// complete-by.
	time.Sleep(time.Until(outage.Add(6 * time.Second))) // the outage itself is what is tested
	if sup.Leading() {
		t.Log("supervisor still believes it leads (its session has not noticed yet); the fence keeps it safe")
	}

	env.Etcd.Restart()
	back := time.Now()

	// The result sent during the outage is recorded: attempt 1 succeeded.
	held := testenv.WaitTask(t, c, "default", "held", wait)
	t.Logf("result sent during the outage recorded %v after etcd returned", time.Since(back).Round(time.Millisecond))
	if x := held.GetSteps()[0]; held.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || x.GetAttempt() != 1 || x.GetOutput() == nil {
		t.Fatalf("held task %v, step %v; want SUCCEEDED with the output reported during the outage", held.GetState(), x)
	}
	// The supervisor leads again and retries the step that expired while
	// etcd was down.
	second := silent.NextAssignment(wait)
	if second.GetRef().GetAttempt() != first.GetRef().GetAttempt()+1 {
		t.Fatalf("after the outage got %v, want the retry of %v", second.GetRef(), first.GetRef())
	}
	t.Logf("expired step retried %v after etcd returned", time.Since(back).Round(time.Millisecond))
	silent.Succeed(second.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "expires", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED ||
		len(history(final, "step.expired")) != 1 {
		t.Fatalf("expired task %v, history %v", final.GetState(), final.GetHistory())
	}
	waitFor(t, "the supervisor to lead again", sup.Leading)

	// New work is dispatched by the same scheduler, to the same SDK agent.
	submit(t, c, "after", step("x", "quick", 10*time.Second))
	if final := testenv.WaitTask(t, c, "default", "after", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED ||
		taskstate.FindStep(final, "x").GetAttempt() != 1 {
		t.Fatalf("task after the outage %v", final)
	}
	select {
	case err := <-agentDone:
		t.Fatalf("the SDK agent stopped during the outage: %v", err)
	default:
	}
}

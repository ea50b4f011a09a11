package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// rank orders a task's states as a task moves through them.
var rank = map[reevev1.TaskState]int{
	reevev1.TaskState_TASK_STATE_PENDING:   1,
	reevev1.TaskState_TASK_STATE_RUNNING:   2,
	reevev1.TaskState_TASK_STATE_SUCCEEDED: 3,
}

// Watch yields the task's states in order and ends after the terminal one,
// across a scheduler that crashes and comes back while the task runs: the
// broken stream is opened again and no state is yielded twice.
func TestWatchResumesAcrossASchedulerRestart(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"gate": func(ctx context.Context, _ *agentsdk.Step) (any, error) {
			started <- struct{}{}
			select {
			case <-release:
				return map[string]bool{"passed": true}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	e.register(t, &reevev1.Workflow{Name: "gate", Steps: []*reevev1.StepSpec{step("gate", "gate")}})
	run, err := e.c.Submit(ctx(t), "gate", nil)
	if err != nil {
		t.Fatal(err)
	}

	states := make(chan *reevev1.Task, 16)
	watchErr := make(chan error, 1)
	go func() {
		defer close(states)
		for task, err := range run.Watch(ctx(t)) {
			if err != nil {
				watchErr <- err
				return
			}
			states <- task
		}
	}()
	var seen []*reevev1.Task
	next := func() *reevev1.Task {
		t.Helper()
		select {
		case task, ok := <-states:
			if !ok {
				select {
				case err := <-watchErr:
					t.Fatalf("watch ended with %v after %d states", err, len(seen))
				default:
				}
				return nil
			}
			seen = append(seen, task)
			return task
		case <-time.After(wait):
			t.Fatalf("no state within %v; seen %d", wait, len(seen))
			return nil
		}
	}
	<-started
	for task := next(); task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING; task = next() {
		if task == nil {
			t.Fatalf("watch ended before RUNNING; seen %d states", len(seen))
		}
	}

	e.s.Kill()
	e.s = e.env.StartScheduler(e.s.Addr)
	close(release)
	for task := next(); task != nil; task = next() {
	}
	last := seen[len(seen)-1]
	if last.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("watch ended at %v; want SUCCEEDED", last.GetState())
	}
	for i := 1; i < len(seen); i++ {
		prev, cur := seen[i-1], seen[i]
		if rank[cur.GetState()] < rank[prev.GetState()] || cur.GetUpdateTime().AsTime().Before(prev.GetUpdateTime().AsTime()) || proto.Equal(prev, cur) {
			t.Fatalf("state %d: %v at %v after %v at %v; want each state a new one, none older than the last", i, cur.GetState(), cur.GetUpdateTime().AsTime(), prev.GetState(), prev.GetUpdateTime().AsTime())
		}
	}
}

// Watching a task that does not exist yields NOT_FOUND once, at once.
func TestWatchStopsOnNotFound(t *testing.T) {
	e := newEnv(t, nil)
	n := 0
	for task, err := range e.c.GetRun("no-such-task").Watch(ctx(t)) {
		n++
		if task != nil || status.Code(errors.Unwrap(err)) != codes.NotFound {
			t.Fatalf("yielded %v, %v; want NOT_FOUND", task, err)
		}
	}
	if n != 1 {
		t.Fatalf("yielded %d times; want once", n)
	}
}

// A submission refused for the submit rate carries a RetryInfo delay: the
// client waits that long and sends it again instead of failing.
func TestSubmitHonoursRetryInfo(t *testing.T) {
	e := testenv.New(t)
	s := e.StartScheduler("", scheduler.WithSubmitRate(0.5, 1))
	wf := client.WithInlineWorkflow(&reevev1.Workflow{Name: "r", Steps: []*reevev1.StepSpec{step("a", "x")}})
	eager, err := client.Dial(s.Addr, client.WithRefusalRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer eager.Close()
	if _, err := eager.Submit(ctx(t), "", nil, wf); err != nil {
		t.Fatalf("first submit: %v", err)
	}
	_, err = eager.Submit(ctx(t), "", nil, wf)
	if d, ok := agentsdk.RetryDelay(errors.Unwrap(err)); status.Code(errors.Unwrap(err)) != codes.ResourceExhausted || !ok || d <= 0 {
		t.Fatalf("second submit over the rate without retries: %v; want RESOURCE_EXHAUSTED with a RetryInfo delay", err)
	}

	patient, err := client.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	start := time.Now()
	if _, err := patient.Submit(ctx(t), "", nil, wf); err != nil {
		t.Fatalf("submit over the rate with retries: %v; want it sent again after the scheduler's delay", err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Fatalf("submit succeeded after %v: it was not refused, the test proves nothing", waited)
	}
}

package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

func registerOn(ctx context.Context, t *testing.T, c reevev1.SchedulerServiceClient, name, typ string) int32 {
	t.Helper()
	resp, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: name, Steps: []*reevev1.StepSpec{step("x", typ)}}})
	if err != nil {
		t.Fatalf("register %s (%s): %v", name, typ, err)
	}
	return resp.GetWorkflow().GetVersion()
}

func latestOf(name string) *reevev1.SubmitTaskRequest_WorkflowRef {
	return &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: name}}
}

// Scheduler A serves submissions from its workflow cache; a version
// registered through scheduler B is nevertheless the one A's next
// submission runs, also when an agent of A claims the task on submit.
func TestSubmitRunsAVersionRegisteredThroughAnotherScheduler(t *testing.T) {
	env := testenv.New(t)
	a, b := env.StartScheduler(""), env.StartScheduler("")
	ca, cb := a.Client(t), b.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	registerOn(ctx, t, ca, "orders", "v1")
	if got := submit(t, ca, &reevev1.SubmitTaskRequest{Workflow: latestOf("orders")}); got.GetWorkflow().GetVersion() != 1 {
		t.Fatalf("first submit ran v%d, want v1", got.GetWorkflow().GetVersion())
	}
	if v := registerOn(ctx, t, cb, "orders", "v2"); v != 2 {
		t.Fatalf("registered through B as v%d, want v2", v)
	}
	got := submit(t, ca, &reevev1.SubmitTaskRequest{Workflow: latestOf("orders")})
	if got.GetWorkflow().GetVersion() != 2 || got.GetSteps()[0].GetType() != "v2" {
		t.Fatalf("submit through A after B registered v2 ran v%d (%s)", got.GetWorkflow().GetVersion(), got.GetSteps()[0].GetType())
	}
	// With an agent of A idle, the task is created claimed: the claim
	// made for the stale version is released and made again.
	agent := testenv.ConnectRaw(t, a.Addr, register("ag", 4, "v3"))
	registerOn(ctx, t, cb, "orders", "v3")
	got = submit(t, ca, &reevev1.SubmitTaskRequest{Workflow: latestOf("orders")})
	if got.GetWorkflow().GetVersion() != 3 {
		t.Fatalf("submit with an idle agent ran v%d, want v3", got.GetWorkflow().GetVersion())
	}
	as := agent.NextAssignment(wait)
	if as.GetRef().GetTaskId() != got.GetId() || as.GetType() != "v3" {
		t.Fatalf("assignment %v, want step x (v3) of task %s", as, got.GetId())
	}
	if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused: %v", ack)
	}
	// Pinned versions and unknown names or versions, through the cache.
	if got := submit(t, ca, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "orders", Version: 1}}}); got.GetWorkflow().GetVersion() != 1 {
		t.Fatalf("pinned v1 ran v%d", got.GetWorkflow().GetVersion())
	}
	for _, ref := range []*reevev1.WorkflowRef{{Name: "nope"}, {Name: "nope", Version: 1}, {Name: "orders", Version: 4}} {
		_, err := ca.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: ref}})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("submit of %v: %v, want NotFound", ref, err)
		}
	}
}

// A submission racing registrations never runs a version older than one
// whose registration returned before the submission began.
func TestSubmitNeverRunsAVersionOlderThanARegistrationBeforeIt(t *testing.T) {
	env := testenv.New(t)
	a, b := env.StartScheduler(""), env.StartScheduler("")
	ca, cb := a.Client(t), b.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var returned atomic.Int32 // the highest version whose registration returned
	returned.Store(registerOn(ctx, t, ca, "race", "t0"))
	const registrations = 20
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 1; i <= registrations; i++ {
			c := cb
			if i%3 == 0 {
				c = ca // through the submitting scheduler too
			}
			resp, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "race", Steps: []*reevev1.StepSpec{step("x", fmt.Sprintf("t%d", i))}}})
			if err != nil {
				t.Errorf("register %d: %v", i, err)
				return
			}
			returned.Store(resp.GetWorkflow().GetVersion())
		}
	}()
	var (
		mu       sync.Mutex
		errs     []error
		submits  atomic.Int64
		versions = map[int32]bool{}
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 2000; n++ {
				select {
				case <-done:
					return
				default:
				}
				floor := returned.Load()
				resp, err := ca.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: latestOf("race")})
				mu.Lock()
				switch v := resp.GetTask().GetWorkflow().GetVersion(); {
				case err != nil:
					errs = append(errs, err)
				case v < floor:
					errs = append(errs, fmt.Errorf("task %s ran v%d, but v%d was registered before it was submitted", resp.GetTask().GetId(), v, floor))
				default:
					versions[v] = true
				}
				mu.Unlock()
				submits.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if returned.Load() != registrations+1 || len(versions) < 2 {
		t.Fatalf("%d registrations returned, %d submissions ran %d distinct versions: the race was not exercised", returned.Load(), submits.Load(), len(versions))
	}
	t.Logf("%d submissions ran %d distinct versions", submits.Load(), len(versions))
}

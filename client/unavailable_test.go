package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// refusals records the UNAVAILABLE answers of each method, as the
// innermost interceptor sees every attempt.
type refusals struct {
	mu      sync.Mutex
	calls   map[string]int
	refused chan string // each refused method, when there is room
}

func (r *refusals) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if status.Code(err) == codes.Unavailable {
		r.mu.Lock()
		r.calls[method]++
		r.mu.Unlock()
		select {
		case r.refused <- method:
		default:
		}
	}
	return err
}

func (r *refusals) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

// With etcd down the scheduler refuses with UNAVAILABLE and a RetryInfo
// delay: Submit (idempotent: it carries its task id) is sent again until
// etcd is back and creates the task once; an operator's action, which may
// have happened, is not sent again.
func TestUnavailableRetriedOnlyWhenSafe(t *testing.T) {
	// Each refusal takes the scheduler's 5 s etcd request timeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := testenv.New(t)
	s := e.StartScheduler("")
	r := &refusals{calls: map[string]int{}, refused: make(chan string, 64)}
	c, err := client.Dial(s.Addr, client.WithDialOptions(grpc.WithChainUnaryInterceptor(r.intercept)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wf := client.WithInlineWorkflow(&reevev1.Workflow{Name: "u", Steps: []*reevev1.StepSpec{step("a", "nobody.serves")}})
	run, err := c.Submit(ctx, "", nil, wf, client.WithTaskID("before"))
	if err != nil {
		t.Fatal(err)
	}

	e.Etcd.Stop()
	if _, err := run.Fail(ctx, "etcd is down"); status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Fatalf("Fail with etcd down: %v; want UNAVAILABLE", err)
	}
	if n := r.count(reevev1.SupervisorService_FailTask_FullMethodName); n != 1 {
		t.Fatalf("FailTask sent %d times; want once (a write that may have happened is not repeated)", n)
	}
	submitted := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, "", nil, wf, client.WithTaskID("during"))
		submitted <- err
	}()
	for m := ""; m != reevev1.SchedulerService_SubmitTask_FullMethodName; {
		select {
		case m = <-r.refused:
		case err := <-submitted:
			t.Fatalf("Submit with etcd down ended before a refusal: %v", err)
		case <-ctx.Done():
			t.Fatal("no refusal of Submit")
		}
	}
	e.Etcd.Restart()
	if err := <-submitted; err != nil {
		t.Fatalf("Submit across etcd's restart: %v; want it sent again after the scheduler's delay", err)
	}
	task, err := c.GetRun("during").Task(ctx)
	if err != nil || task.GetId() != "during" {
		t.Fatalf("the task submitted while etcd was down: %v, %v", task, err)
	}
}

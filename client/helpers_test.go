package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// wait bounds every wait of these tests.
const wait = 20 * time.Second

// env is a scheduler on a real etcd, an agent serving handlers, and a
// Client of the scheduler.
type env struct {
	env *testenv.Env
	s   *testenv.Scheduler
	c   *client.Client
}

// newEnv starts a scheduler with opts and an agent serving handlers (step
// type → handler), and dials a Client.
func newEnv(t *testing.T, handlers map[string]agentsdk.HandlerFunc, opts ...scheduler.Option) *env {
	t.Helper()
	e := testenv.New(t)
	s := e.StartScheduler("", opts...)
	startAgent(t, []string{s.Addr}, handlers)
	c, err := client.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{env: e, s: s, c: c}
}

// startAgent runs an agent serving handlers until the test ends.
func startAgent(t *testing.T, addrs []string, handlers map[string]agentsdk.HandlerFunc, opts ...agentsdk.Option) {
	t.Helper()
	if len(handlers) == 0 {
		return
	}
	opts = append([]agentsdk.Option{agentsdk.WithLogger(testenv.Logger()), agentsdk.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)}, opts...)
	a, err := agentsdk.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		a.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
}

// register registers w on the env's scheduler.
func (e *env) register(t *testing.T, w *reevev1.Workflow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := e.c.SchedulerService().RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
		t.Fatalf("register %s: %v", w.GetName(), err)
	}
}

// step is a step spec of type typ depending on deps.
func step(name, typ string, deps ...string) *reevev1.StepSpec {
	return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(10 * time.Second)}
}

// ctx returns a context bounded by wait.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return c
}

package agentsdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

type tenantKey struct{}

// A value on Run's ctx reaches every handler, while each step's ctx still
// ends on its own: canceling one task leaves the other step running.
func TestHandlerContextCarriesRunValuesAndEndsPerStep(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	// Shutdown does not wait for the step left running.
	a := newAgent(t, []string{s.Addr}, agentsdk.WithShutdownTimeout(100*time.Millisecond))
	type seen struct {
		task   string
		tenant any
		ctx    context.Context
	}
	started := make(chan seen, 2)
	a.Handle("long", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		started <- seen{st.TaskID, ctx.Value(tenantKey{}), ctx}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, stopRun := context.WithCancel(context.WithValue(context.Background(), tenantKey{}, "acme"))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		stopRun()
		<-done
	}()

	c := s.Client(t)
	submit(t, c, "stay", spec("x", "long", time.Minute))
	submit(t, c, "cancel", spec("x", "long", time.Minute))
	ctxs := map[string]context.Context{}
	for range 2 {
		select {
		case sn := <-started:
			if sn.tenant != "acme" {
				t.Fatalf("task %s: handler ctx value %v, want the Run ctx's acme", sn.task, sn.tenant)
			}
			ctxs[sn.task] = sn.ctx
		case <-time.After(wait):
			t.Fatal("handlers did not start")
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.CancelTask(cctx, &reevev1.CancelTaskRequest{TaskId: "cancel"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctxs["cancel"].Done():
	case <-time.After(wait):
		t.Fatal("canceled task's handler ctx did not end")
	}
	if err := ctxs["stay"].Err(); err != nil {
		t.Fatalf("the other step's ctx ended with its neighbour's: %v", err)
	}
	if final, err := c.GetTask(cctx, &reevev1.GetTaskRequest{TaskId: "stay"}); err != nil || final.GetTask().GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task stay: %v, %v; want RUNNING", final.GetTask().GetState(), err)
	}
}

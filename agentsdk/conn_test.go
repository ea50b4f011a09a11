package agentsdk_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// An agent on the caller's connection runs steps over it and leaves it open
// for the caller.
func TestAgentRunsOnAnExistingConnection(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	cc := testenv.Dial(t, s.Addr)
	a, err := agentsdk.NewWithConn(cc, agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) { return "done", nil })
	stop := runAgent(t, a)
	c := reevev1.NewSchedulerServiceClient(cc)
	submit(t, c, "on-conn", spec("work", "work", 10*time.Second))
	if final := testenv.WaitTask(t, c, "default", "on-conn", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v: %v", final.GetState(), final.GetReason())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := cc.GetState(); st == connectivity.Shutdown {
		t.Fatal("the agent closed the caller's connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "on-conn"}); err != nil {
		t.Fatalf("the caller's connection after Run: %v", err)
	}
}

func TestNewWithConnRefusesDialOptions(t *testing.T) {
	cc := testenv.Dial(t, "127.0.0.1:1")
	if _, err := agentsdk.NewWithConn(cc, agentsdk.WithTLS(&tls.Config{})); err == nil {
		t.Fatal("WithTLS accepted on an existing connection")
	}
	if _, err := agentsdk.NewWithConn(nil); err == nil {
		t.Fatal("nil connection accepted")
	}
}

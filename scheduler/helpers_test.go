package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/pgtest"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// TestMain runs the tests with one PostgreSQL server for the package (a
// database per test: pgtest.Run), then checks, as goleak.VerifyTestMain
// does, that a passing run leaked no goroutine.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if code == 0 {
		if err := goleak.Find(
			// etcd's and grpc's process-wide background goroutines.
			goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).sendLoop"),
			goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
			goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

const wait = 20 * time.Second

// step is a shorthand for a step definition.
func step(name, typ string, deps ...string) *reevev1.StepSpec {
	return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(10 * time.Second)}
}

func inline(steps ...*reevev1.StepSpec) *reevev1.SubmitTaskRequest_InlineWorkflow {
	return &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "test", Steps: steps}}
}

func submit(t testing.TB, c reevev1.SchedulerServiceClient, req *reevev1.SubmitTaskRequest) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.SubmitTask(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return resp.GetTask()
}

func register(id string, max int32, types ...string) *reevev1.Register {
	return &reevev1.Register{AgentId: id, StepTypes: types, MaxConcurrentSteps: max}
}

func stepOf(t *reevev1.Task, name string) *reevev1.Step {
	for _, s := range t.GetSteps() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func newEnv(t *testing.T) (*testenv.Env, *testenv.Scheduler, reevev1.SchedulerServiceClient) {
	t.Helper()
	env := testenv.New(t)
	s := env.StartScheduler("")
	return env, s, s.Client(t)
}

func schedulerRetention(d time.Duration) []scheduler.Option {
	return []scheduler.Option{scheduler.WithRetention(d), scheduler.WithSweepInterval(20 * time.Millisecond)}
}

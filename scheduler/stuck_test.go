package scheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// An agent registers with a huge max_concurrent_steps and then never reads
// its stream, while a healthy SDK agent serves the same step type. Every task
// must succeed on the healthy agent, none may fail, and the stuck agent must
// not collect the work (nor the server's memory) in its send queue.
func TestStuckAgentDoesNotTakeTheWork(t *testing.T) {
	const tasks = 300
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithAckTimeout(2*time.Second), scheduler.WithSendQueueBytes(1<<20))
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)

	// The stuck agent: registers, reads Registered, then never calls Recv.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := reevev1.NewAgentServiceClient(testenv.Dial(t, s.Addr)).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: register("stuck", 10000, "work")}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetRegistered() == nil {
		t.Fatalf("register: %v %v", m, err)
	}

	pad := strings.Repeat("x", 32<<10) // 32 KiB inputs, as in the report
	wf := &reevev1.Workflow{Name: "stuck", Steps: []*reevev1.StepSpec{{
		Name: "a", Type: "work", Timeout: durationpb.New(30 * time.Second),
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(100 * time.Millisecond)},
	}}}
	ids := make([]string, 0, tasks)
	for i := range tasks {
		task := submit(t, c, &reevev1.SubmitTaskRequest{
			Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf},
			Input:    testenv.Value(t, map[string]any{"i": i, "pad": pad}),
		})
		ids = append(ids, task.GetId())
	}

	// Only the stuck agent serves "work" so far: it is offered what fits
	// its send queue. Once that is taken back, the healthy agent connects.
	deadline := time.Now().Add(wait)
	for stepOf(getTask(t, c, ids[0]), "a").GetUnacknowledgedAttempts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stuck agent's first assignment was never taken back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	agent, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID("healthy"), agentsdk.WithMaxConcurrentSteps(8), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	agent.Handle("work", func(context.Context, *agentsdk.Step) (any, error) { return map[string]any{"ok": true}, nil })
	actx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = agent.Run(actx) })
	defer func() { stop(); wg.Wait() }()

	toStuck := 0
	for _, id := range ids {
		got := testenv.WaitTask(t, c, "", id, 90*time.Second)
		if got.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("task %s ended %s: %s", id, got.GetState(), got.GetReason())
		}
		if st := stepOf(got, "a"); st.GetFailureCount() != 0 {
			t.Errorf("task %s: step counted %d failures for attempts the stuck agent never acknowledged", id, st.GetFailureCount())
		}
		for _, h := range got.GetHistory() {
			if h.GetKind() == "step.dispatched" && h.GetMessage() == "agent stuck" {
				toStuck++
			}
		}
	}
	// The stuck agent gets what fits its 1 MiB send queue (plus what gRPC's
	// flow-control windows take) and then a probe every 30s; without the
	// bound it would take every task.
	if limit := tasks / 3; toStuck > limit {
		t.Fatalf("%d of %d assignments went to the stuck agent, want at most %d", toStuck, tasks, limit)
	}
	t.Logf("%d assignments went to the stuck agent and were taken back", toStuck)
}

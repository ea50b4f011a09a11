package supervisor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// BenchmarkTickWith100kLiveTasks measures one supervisor tick with 100,000
// tasks whose steps are dispatched and not expired: the tick ranges only the
// expired part of the deadline index, so it must not grow with live tasks.
func BenchmarkTickWith100kLiveTasks(b *testing.B) {
	const live = 100_000
	env := testenv.New(b)
	s := env.StartScheduler("")
	cli := env.Etcd.InProcessClient()
	// Closed before the member stops: its lease keepalive goroutines (the
	// session below) end only with the client.
	b.Cleanup(func() { _ = cli.Close() })
	st := store.New(cli)
	ctx := context.Background()
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Hour)}}}
	now := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range work {
				id := fmt.Sprintf("live-%06d", i)
				task := taskstate.New("default", id, wf, nil, now)
				if err := taskstate.Claim(task, "a", 1, "s1", "agent", now); err != nil {
					b.Error(err)
					return
				}
				if _, _, err := st.CreateTask(ctx, &storev1.TaskRecord{Task: task}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for i := range live {
		work <- i
	}
	close(work)
	wg.Wait()

	sess, err := concurrency.NewSession(cli)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, st.ElectionPrefix())
	if err := el.Campaign(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	sup, err := supervisor.New(cli, []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(testenv.Dial(b, s.Addr))})
	if err != nil {
		b.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: el.Key(), Revision: el.Rev(), SupervisorId: "bench"}
	b.ResetTimer()
	for b.Loop() {
		if !sup.Tick(ctx, fence) {
			b.Fatal("lost leadership")
		}
	}
}

// BenchmarkDetectionLatency measures how long after an execution's
// complete-by the supervisor records its expiry, over 30 silent executions
// (the leader wakes at the deadline; the 1 s tick is only its safety net);
// it reports the median and the maximum.
func BenchmarkDetectionLatency(b *testing.B) {
	env := testenv.New(b)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Second))
	c := s.Client(b)
	agent := testenv.ConnectRaw(b, s.Addr, &reevev1.Register{AgentId: "silent", StepTypes: []string{"t"}, MaxConcurrentSteps: 100})
	var lat []time.Duration
	for b.Loop() {
		lat = lat[:0]
		ctx := context.Background()
		for i := range 30 {
			id := fmt.Sprintf("d%d-%d", time.Now().UnixNano(), i)
			spec := &reevev1.StepSpec{Name: "x", Type: "t", Timeout: durationpb.New(time.Duration(200+37*i) * time.Millisecond),
				RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 1}}
			if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Steps: []*reevev1.StepSpec{spec}}}}); err != nil {
				b.Fatal(err)
			}
			agent.NextAssignment(wait) // and never answer
			final := testenv.WaitTask(b, c, "default", id, wait)
			var dispatched, expired time.Time
			for _, h := range final.GetHistory() {
				switch h.GetKind() {
				case "step.dispatched":
					dispatched = h.GetTime().AsTime()
				case "step.expired":
					expired = h.GetTime().AsTime()
				}
			}
			lat = append(lat, expired.Sub(dispatched.Add(spec.GetTimeout().AsDuration())))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}

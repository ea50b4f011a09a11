package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// TestFlowLimitBench measures a binding max_running (docs/benchmarks.md,
// "Flow control"): REEVE_BENCH_FLOW tasks of one step queue with no agent,
// then one agent (capacity 200, steps that end at once) drains them under
// REEVE_BENCH_FLOW_LIMIT (0: no limit). It reports the drain's throughput,
// the etcd key writes per task during the drain (puts and deletes seen by
// a watch of the whole prefix: a range delete counts each key it removes),
// and, with a limit, how long a freed slot stays free: from each slot
// key's delete to the next slot key's put, as the watch delivers them (in
// order, each put matched to the oldest free slot).
//
//	REEVE_BENCH_FLOW=10000 REEVE_BENCH_FLOW_LIMIT=50 go test ./scheduler -run TestFlowLimitBench -v
func TestFlowLimitBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_FLOW"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_FLOW to run the flow control benchmark")
	}
	limit, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_FLOW_LIMIT"))
	reader := sdkmetric.NewManualReader()
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "job", Steps: []*reevev1.StepSpec{step("a", "b")}}}); err != nil {
		t.Fatal(err)
	}
	if limit > 0 {
		q := queues(t, s)
		setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "b", MaxRunning: int32(limit)})
		waitApplied(t, q, "b", int32(limit))
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("t-%06d", i), Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "job"}}}); err != nil {
					t.Errorf("submit: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d tasks queued", n)

	// Follow every key write from here on.
	cli := env.Etcd.Client()
	head, err := cli.Get(ctx, "/reeve/tasks/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		writes  int
		freed   []time.Time // slot deletes not yet followed by a put
		gaps    []time.Duration
		watched = make(chan struct{})
	)
	wctx, stopWatch := context.WithCancel(ctx)
	go func() {
		defer close(watched)
		for wr := range cli.Watch(wctx, "/reeve/", clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1)) {
			now := time.Now()
			mu.Lock()
			for _, e := range wr.Events {
				writes++
				if len(e.Kv.Key) < len("/reeve/slots/") || string(e.Kv.Key[:len("/reeve/slots/")]) != "/reeve/slots/" {
					continue
				}
				if e.Type == mvccpb.DELETE {
					freed = append(freed, now)
				} else if len(freed) > 0 {
					gaps = append(gaps, now.Sub(freed[0]))
					freed = freed[1:]
				}
			}
			mu.Unlock()
		}
	}()

	a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID("bench"), agentsdk.WithMaxConcurrentSteps(200), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("b", func(context.Context, *agentsdk.Step) (any, error) { return map[string]any{"ok": true}, nil })
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = a.Run(actx) }()
	defer func() { stopAgent(); <-agentDone }()
	began := time.Now()
	for {
		counts, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		done := int64(0)
		for _, sc := range counts.GetCounts() {
			if sc.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				done = sc.GetCount()
			}
		}
		if done >= int64(n) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d done", done, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(began)
	stopWatch()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(gaps)
	q := func(p float64) time.Duration {
		if len(gaps) == 0 {
			return 0
		}
		return gaps[min(len(gaps)-1, int(p*float64(len(gaps))))]
	}
	t.Logf("limit %d: %d tasks drained in %s: %.0f tasks/s; %.2f etcd key writes per task; freed slot to the next slot key's put, as the watch sees them: p50 %s p99 %s max %s (%d samples)",
		limit, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), float64(writes)/float64(n), q(0.5), q(0.99), q(1), len(gaps))
	// The dispatcher's own measure: a freed slot seen to a claim taking one.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != "reeve.queue.slot_idle" || !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				quant := func(p float64) string {
					rank, seen := uint64(p*float64(dp.Count)), uint64(0)
					for i, c := range dp.BucketCounts {
						if seen += c; seen > rank {
							if i < len(dp.Bounds) {
								return fmt.Sprintf("<= %gms", dp.Bounds[i]*1000)
							}
							return "> the last bound"
						}
					}
					return "?"
				}
				t.Logf("reeve.queue.slot_idle: %d samples, mean %.3fms, p50 %s, p99 %s, max %.3fms", dp.Count, dp.Sum/float64(dp.Count)*1000, quant(0.5), quant(0.99), mustMax(dp)*1000)
			}
		}
	}
}

func mustMax(dp metricdata.HistogramDataPoint[float64]) float64 {
	v, _ := dp.Max.Value()
	return v
}

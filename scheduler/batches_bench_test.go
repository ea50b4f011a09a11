package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// TestBatchBench measures one batch job over N tasks (N from
// REEVE_BENCH_BATCH; skipped without it): N pending tasks (no agent), then
// one job that pauses them all; it reports how long the job took and its
// rate, and checks every task was paused once.
//
//	REEVE_BENCH_BATCH=100000 go test ./scheduler/ -run TestBatchBench -v -timeout 20m
func TestBatchBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_BATCH"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_BATCH to run the batch job benchmark")
	}
	_, s, c := newEnv(t)
	b := reevev1.NewBatchServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 19*time.Minute)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for i := range work {
				if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("bb-%06d", i), Workflow: inline(step("a", "nobody-serves-this"))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	began := time.Now()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d tasks submitted in %v", n, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	resp, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{Action: reevev1.BatchAction_BATCH_ACTION_PAUSE, Filter: &reevev1.TaskFilter{TaskIdPrefix: "bb-"}})
	if err != nil {
		t.Fatal(err)
	}
	var j *reevev1.BatchJob
	for {
		r, err := b.GetBatch(ctx, &reevev1.GetBatchRequest{BatchId: resp.GetJob().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if j = r.GetJob(); j.GetState() != reevev1.BatchState_BATCH_STATE_RUNNING {
			break
		}
		time.Sleep(time.Second)
	}
	took := time.Since(began)
	t.Logf("batch of %d: %v in %v (%.0f tasks/s): matched %d, applied %d, skipped %d, failed %d",
		n, j.GetState(), took.Round(time.Millisecond), float64(j.GetApplied())/took.Seconds(), j.GetMatched(), j.GetApplied(), j.GetSkipped(), j.GetFailed())
	if j.GetState() != reevev1.BatchState_BATCH_STATE_SUCCEEDED || j.GetApplied() != int64(n) {
		t.Fatalf("job %v, want SUCCEEDED with %d applied", j, n)
	}
}

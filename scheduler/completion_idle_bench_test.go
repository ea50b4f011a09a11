package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// TestWaitingStepsIdleBench measures what steps waiting for a completion
// from outside cost while they wait (issue 35): N tasks (N from
// REEVE_BENCH_WAITING; skipped without it) whose only step waits (a day),
// then the etcd bytes per waiting task (its record and its index keys:
// created, deadline, waiting), and the CPU of the process — etcd, a
// scheduler and a supervisor leader (tick 1 s, `reeve serve`'s default) —
// over 20 s in which nothing is due (target ≤ 1 % of one core).
//
//	REEVE_BENCH_WAITING=100000 go test ./scheduler/ -run TestWaitingStepsIdleBench -v -timeout 20m
func TestWaitingStepsIdleBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_WAITING"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_WAITING to run the idle cost benchmark of waiting steps")
	}
	env, s, c := newEnv(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 19*time.Minute)
	defer cancel()
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "approval", Steps: []*reevev1.StepSpec{
		{Name: "approve", WaitFor: "external", Timeout: durationpb.New(24 * time.Hour)},
	}}}
	work := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for range 128 {
		wg.Go(func() {
			for i := range work {
				if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("wait-%06d", i), Workflow: wf}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d waiting tasks submitted in %v", n, time.Since(began).Round(time.Millisecond))

	// Bytes: every key and value under the prefix that belongs to a task.
	cli := env.Etcd.Client()
	var record, index, keys int64
	for _, p := range []string{"tasks/", "created-state/", "created-wf-state/", "deadlines/", "waiting/", "ready/"} {
		from, end := "/reeve/"+p, clientv3.GetPrefixRangeEnd("/reeve/"+p)
		for {
			resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(10000))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				b := int64(len(kv.Key) + len(kv.Value))
				if strings.HasPrefix(p, "tasks/") {
					record += b
				} else {
					index += b
					keys++
				}
			}
			if !resp.More {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	t.Logf("etcd bytes per waiting task: %d (record %d, %.1f index keys %d)", (record+index)/int64(n), record/int64(n), float64(keys)/float64(n), index/int64(n))

	// Nothing is due for a day: the process's CPU over 20 s, after the
	// submissions' aftermath settled (REEVE_BENCH_SETTLE, default 30 s:
	// etcd's snapshot and compaction, the garbage collector).
	settle := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("REEVE_BENCH_SETTLE")); err == nil {
		settle = d
	}
	time.Sleep(settle)
	if path := os.Getenv("REEVE_BENCH_IDLE_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	cpu0, wall0 := processCPU(t), time.Now()
	time.Sleep(20 * time.Second)
	idle := float64(processCPU(t)-cpu0) / float64(time.Since(wall0))
	t.Logf("idle with %d waiting steps: the process used %.2f%% of one core (etcd, scheduler and supervisor together)", n, idle*100)
}

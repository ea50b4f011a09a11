package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// TestTimerFiringBench measures issue 35's timer targets with N sleep steps
// (env REEVE_BENCH_TIMERS; skipped without it), each the only step of its
// task, all due within the same second: how late each sleep ends after its
// complete-by (the step's end time less its ready time plus its sleep),
// p50, p99 and max. N=1 is the single timer. One scheduler, one supervisor
// with the production tick (5 s), no agent.
//
//	REEVE_BENCH_TIMERS=10000 go test ./supervisor/ -run TestTimerFiringBench -v -timeout 15m
func TestTimerFiringBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_TIMERS"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_TIMERS to run the timer firing benchmark")
	}
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()

	// Every sleep ends within one second that starts after the last
	// submission: each task's sleep is chosen to end at due + i/n s.
	created := time.Now()
	due := created.Add(10*time.Second + time.Duration(n)*2*time.Millisecond).Truncate(time.Second)
	submitAll(t, n, func(i int) {
		end := due.Add(time.Duration(i) * time.Second / time.Duration(n))
		req := inline(fmt.Sprintf("t-%06d", i), &reevev1.Workflow{Name: "nap", Steps: []*reevev1.StepSpec{sleepStep("nap", time.Until(end))}})
		if _, err := c.SubmitTask(ctx, req); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%d sleeping tasks submitted in %v; due from %v", n, time.Since(created).Round(time.Millisecond), due.Format(time.TimeOnly))
	if time.Now().After(due.Add(-time.Second)) {
		t.Fatalf("submitting took too long: the first timer is due at %v", due)
	}
	waitSucceeded(t, ctx, c, n, 5*time.Minute)

	var late []time.Duration
	first, last := time.Time{}, time.Time{}
	token := ""
	for range 1000 {
		resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1000, PageToken: token, TaskIdPrefix: "t-", View: reevev1.TaskView_TASK_VIEW_FULL})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range resp.GetTasks() {
			st := tk.GetSteps()[0]
			at := st.GetReadyTime().AsTime().Add(tk.GetWorkflow().GetSteps()[0].GetSleep().AsDuration())
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
			late = append(late, st.GetEndTime().AsTime().Sub(at))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(late) != n {
		t.Fatalf("%d tasks listed, want %d", len(late), n)
	}
	slices.Sort(late)
	q := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
	t.Logf("%d timers due within %v: fired after their time p50 %v, p99 %v, max %v", n, last.Sub(first).Round(time.Millisecond),
		q(0.50).Round(time.Millisecond), q(0.99).Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
}

// TestWaitingTimersBench measures what N waiting timers (env
// REEVE_BENCH_WAITING; skipped without it) cost while nothing is due: N
// tasks of a registered workflow whose one step sleeps an hour. It reports
// the etcd bytes a waiting step takes (its task's keys and values, and the
// growth of etcd's database in use, per task) and the CPU of the whole
// process (etcd, the scheduler and the supervisor together: an upper bound
// on theirs) over 20 s. Production tick (5 s).
//
//	REEVE_BENCH_WAITING=100000 go test ./supervisor/ -run TestWaitingTimersBench -v -timeout 15m
//
// REEVE_BENCH_IDLE_PROFILE=PATH writes a CPU profile of the idle window.
func TestWaitingTimersBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_WAITING"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_WAITING to run the waiting timers benchmark")
	}
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	wf := &reevev1.Workflow{Name: "nap", Steps: []*reevev1.StepSpec{sleepStep("nap", time.Hour)}}
	if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		t.Fatal(err)
	}
	cli := env.Etcd.Client()
	before := dbInUse(t, ctx, cli)
	created := time.Now()
	submitAll(t, n, func(i int) {
		if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("w-%07d", i),
			Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "nap"}}}); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%d waiting timers submitted in %v", n, time.Since(created).Round(time.Millisecond))
	grown := dbInUse(t, ctx, cli) - before

	// The keys of one waiting task, and their sizes.
	resp, err := cli.Get(ctx, "/reeve/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var kvBytes, kvs int
	var sample []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.Contains(k, "/w-0000000") {
			kvBytes += len(kv.Key) + len(kv.Value)
			kvs++
			sample = append(sample, fmt.Sprintf("%s (%d B value)", k, len(kv.Value)))
		}
	}
	resp = nil
	t.Logf("one waiting task: %d keys, %d bytes of keys and values: %s", kvs, kvBytes, strings.Join(sample, ", "))
	t.Logf("etcd database in use grew by %d bytes for %d tasks: %d bytes per waiting step", grown, n, grown/int64(n))

	if path := os.Getenv("REEVE_BENCH_IDLE_PROFILE"); path != "" {
		// go tool pprof -top PATH
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	time.Sleep(5 * time.Second) // the submissions' tail settles
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(20 * time.Second)
	idle := float64(cpuTime(t)-cpu0) / float64(time.Since(wall0))
	t.Logf("idle with %d waiting timers: the process used %.2f%% of one core (etcd, scheduler and supervisor together)", n, idle*100)
}

// submitAll runs submit(i) for i in [0, n) on 64 goroutines.
func submitAll(t *testing.T, n int, submit func(i int)) {
	t.Helper()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range work {
				submit(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// waitSucceeded polls the counts until n tasks SUCCEEDED.
func waitSucceeded(t *testing.T, ctx context.Context, c reevev1.SchedulerServiceClient, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var done int64
		for _, sc := range resp.GetCounts() {
			if sc.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				done += sc.GetCount()
			}
		}
		if done >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks succeeded after %v", done, n, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func dbInUse(t *testing.T, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	return st.DbSizeInUse
}


package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// TestScheduleFiringBench measures issue 38's target: N schedules (env
// REEVE_BENCH_SCHEDULES; the test is skipped without it) each firing every
// minute, all first at the same minute: how late each time's task starts
// after its nominal time (its first step made ready: p50, p99, max, from
// the tasks' ids and steps), and the CPU of the whole process (etcd, the
// scheduler and the supervisor together: an upper bound on the firer's)
// during 20 s in which nothing is due. One scheduler (firing ahead as by
// default, or REEVE_BENCH_FIRE_AHEAD, a duration), one supervisor with the
// production tick (5 s); allow_all, no agent (the tasks stay pending); the
// GC set as the scheduler command sets it.
//
//	REEVE_BENCH_SCHEDULES=10000 go test ./supervisor/ -run TestScheduleFiringBench -v -timeout 15m
//
// REEVE_BENCH_IDLE_PROFILE=PATH writes a CPU profile of the idle window.
func TestScheduleFiringBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REEVE_BENCH_SCHEDULES"))
	if n <= 0 {
		t.Skip("set REEVE_BENCH_SCHEDULES to run the schedule firing benchmark")
	}
	// The GC as `reeve scheduler` and `reeve dev` set it by default
	// (cmd/reeve/gc.go: --gc-percent 400, a memory limit of half the
	// machine's memory); GOGC in the environment keeps the runtime's.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		var si syscall.Sysinfo_t
		if err := syscall.Sysinfo(&si); err == nil {
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(max(int64(si.Totalram)*int64(si.Unit)/2, 1<<30)))
		}
	}
	env := testenv.New(t)
	// Records as a scheduler without an archive keeps them (testenv turns
	// compression on).
	ahead := scheduler.DefaultScheduleFireAhead
	if v := os.Getenv("REEVE_BENCH_FIRE_AHEAD"); v != "" {
		var err error
		if ahead, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	s := env.StartScheduler("", scheduler.WithRecordCompression(false), scheduler.WithScheduleFireAhead(ahead))
	c := s.Client(t)
	sc := reevev1.NewScheduleServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "job", Steps: []*reevev1.StepSpec{step("a", "t", time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(5*time.Second))

	// Every schedule's first time is the same minute, after they all exist.
	created := time.Now()
	first := created.Truncate(time.Minute).Add(2 * time.Minute)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range work {
				_, err := sc.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: &reevev1.Schedule{Name: fmt.Sprintf("b-%05d", i),
					Spec:     &reevev1.ScheduleSpec{Every: durationpb.New(time.Minute), StartTime: timestamppb.New(first)},
					Action:   &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "job"}},
					Policies: &reevev1.SchedulePolicies{Overlap: reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}}})
				if err != nil {
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
	t.Logf("%d schedules created in %v; first time %v", n, time.Since(created).Round(time.Millisecond), first.Format(time.TimeOnly))
	if time.Now().After(first.Add(-ahead - 25*time.Second)) {
		t.Fatalf("creating took too long: no idle window before %v", first)
	}

	// Nothing is due until first (less the fire-ahead): the process's CPU
	// over 20 s.
	time.Sleep(time.Until(first.Add(-ahead - 22*time.Second)))
	// A CPU profile of the idle window, to tell the firer's share:
	// go tool pprof -top -focus 'supervisor.\(\*Supervisor\).(fireSchedules|watchScheduleDue)' PATH
	stop := cpuProfile(t, os.Getenv("REEVE_BENCH_IDLE_PROFILE"))
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(20 * time.Second)
	idle := float64(cpuTime(t)-cpu0) / float64(time.Since(wall0))
	stop()
	t.Logf("idle: the process used %.2f%% of one core (etcd, scheduler and supervisor together)", idle*100)

	// The first firing: wait until every schedule's task exists.
	// REEVE_BENCH_FIRE_PROFILE=PATH writes a CPU profile of the firing.
	time.Sleep(time.Until(first.Add(-ahead - 100*time.Millisecond)))
	stop = cpuProfile(t, os.Getenv("REEVE_BENCH_FIRE_PROFILE"))
	// REEVE_BENCH_FIRE_BLOCK_PROFILE=PATH writes where goroutines waited
	// during the firing (a block profile: channels, mutexes, selects).
	blockPath := os.Getenv("REEVE_BENCH_FIRE_BLOCK_PROFILE")
	if blockPath != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	cpu1, wall1, etcd1, wait1 := cpuTime(t), time.Now(), etcdStats(t), runQueueWait()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, sc := range resp.GetCounts() {
			total += sc.GetCount()
		}
		if total >= int64(n) {
			stop()
			// An upper bound: the count polls every 200 ms.
			t.Logf("firing: the process used %v of CPU in %v (from 100 ms before the firing (%v ahead of the time) until every task exists)",
				(cpuTime(t) - cpu1).Round(time.Millisecond), time.Since(wall1).Round(time.Millisecond), ahead)
			etcdStats(t).logSince(t, etcd1)
			if blockPath != "" {
				runtime.SetBlockProfileRate(0)
				f, err := os.Create(blockPath)
				if err != nil {
					t.Fatal(err)
				}
				if err := pprof.Lookup("block").WriteTo(f, 0); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
			}
			// Linux: how long the process's threads were runnable but not
			// running (the box's other load, or more runnable threads than
			// cores).
			t.Logf("firing: the process's threads waited %v for a CPU", (runQueueWait() - wait1).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks after 5 minutes", total, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Then until every task of the first time started (fired ahead, the
	// scheduler that fired it starts it at its time): a count, cheap beside
	// the starts it waits for. REEVE_BENCH_START_PROFILE=PATH writes a CPU
	// profile from 100 ms before the time until then.
	stop = func() {}
	if path := os.Getenv("REEVE_BENCH_START_PROFILE"); path != "" && ahead > 0 {
		time.Sleep(time.Until(first.Add(-100 * time.Millisecond)))
		stop = cpuProfile(t, path)
	}
	cpu2 := cpuTime(t)
	for {
		resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetWaitingToStart().GetValue() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks not started after 5 minutes", resp.GetWaitingToStart().GetValue(), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	t.Logf("every task started %v after the time (polled every 200 ms); the process used %v of CPU from 100 ms before the firing, %v of it since every task existed",
		time.Since(first).Round(time.Millisecond), (cpuTime(t) - cpu1).Round(time.Millisecond), (cpuTime(t) - cpu2).Round(time.Millisecond))
	var late, made []time.Duration
	{
		waiting := 0
		token := ""
		for range 1000 {
			resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1000, PageToken: token, TaskIdPrefix: "sched-"})
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range resp.GetTasks() {
				_, at, err := schedule.ParseTaskID(tk.GetId())
				if err != nil {
					t.Fatal(err)
				}
				if !at.Equal(first) {
					continue
				}
				made = append(made, tk.GetCreateTime().AsTime().Sub(at))
				if ready := tk.GetSteps()[0].GetReadyTime(); ready != nil {
					late = append(late, ready.AsTime().Sub(at))
				} else {
					waiting++
				}
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		if waiting > 0 {
			t.Fatalf("%d tasks of the first time not started", waiting)
		}
	}
	if len(late) != n {
		t.Fatalf("%d tasks of the first time, want %d", len(late), n)
	}
	slices.Sort(late)
	slices.Sort(made)
	q := func(d []time.Duration, p float64) time.Duration {
		return d[min(len(d)-1, int(p*float64(len(d))))].Round(time.Millisecond)
	}
	t.Logf("first firing of %d schedules: task created after its time (negative: ahead of it) min %v, p50 %v, max %v",
		n, made[0].Round(time.Millisecond), q(made, 0.50), made[len(made)-1].Round(time.Millisecond))
	t.Logf("first firing of %d schedules: task started after its time p50 %v, p99 %v, max %v",
		n, q(late, 0.50), q(late, 0.99), late[len(late)-1].Round(time.Millisecond))
}

// cpuProfile starts a CPU profile written to path ("": none) and returns
// what stops it (also at the test's end, if not called before).
func cpuProfile(t *testing.T, path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { pprof.StopCPUProfile(); _ = f.Close() }) }
	t.Cleanup(stop)
	return stop
}

// etcdStat is what the embedded etcd did, from its metrics on the default
// Prometheus registry (the one etcd of this process): raft proposals
// committed, WAL fsyncs and backend commits (count and seconds), keys put.
type etcdStat struct {
	proposals, puts                   float64
	fsyncs, fsyncSec, commits, comSec float64
}

func etcdStats(t *testing.T) etcdStat {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s etcdStat
	for _, mf := range families {
		if len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch mf.GetName() {
		case "etcd_server_proposals_committed_total":
			s.proposals = m.GetGauge().GetValue()
		case "etcd_mvcc_put_total":
			s.puts = m.GetCounter().GetValue()
		case "etcd_disk_wal_fsync_duration_seconds":
			s.fsyncs, s.fsyncSec = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		case "etcd_disk_backend_commit_duration_seconds":
			s.commits, s.comSec = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		}
	}
	return s
}

func (s etcdStat) logSince(t *testing.T, s0 etcdStat) {
	ms := func(sec, n float64) float64 { return 1000 * sec / max(n, 1) }
	t.Logf("etcd during the firing: %.0f raft proposals, %.0f keys put, %.0f WAL fsyncs (mean %.2f ms, %.2f s in all), %.0f backend commits (mean %.2f ms, %.2f s in all)",
		s.proposals-s0.proposals, s.puts-s0.puts, s.fsyncs-s0.fsyncs, ms(s.fsyncSec-s0.fsyncSec, s.fsyncs-s0.fsyncs), s.fsyncSec-s0.fsyncSec,
		s.commits-s0.commits, ms(s.comSec-s0.comSec, s.commits-s0.commits), s.comSec-s0.comSec)
}

// runQueueWait is the time the process's threads spent runnable, waiting
// for a CPU (the second field of /proc/self/task/*/schedstat; threads that
// exited are not counted); 0 where that is not readable.
func runQueueWait() time.Duration {
	paths, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var sum time.Duration
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

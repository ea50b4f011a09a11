// Command bench-temporal runs the workload of `reeve bench --steps 1` against
// a Temporal server: a workflow of one no-op activity, submitted closed loop
// (-concurrency in flight) or open loop (-rate per second), served by a
// worker in this process, and prints one JSON object with tasks/s,
// submit→completed p50/p99/max and, given -server-pid, the server's CPU
// seconds per workflow and its resident memory before and after the load.
// scripts/bench-temporal.sh installs the Temporal CLI, starts its dev server
// and runs this.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const queue = "bench"

// NoopActivity does nothing, like `reeve bench`'s agents.
func NoopActivity(context.Context) error { return nil }

// OneStep is the one-step workflow: one activity with a one-minute timeout
// (the timeout of `reeve bench`'s step).
func OneStep(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(ctx, NoopActivity).Get(ctx, nil)
}

type report struct {
	Server          string    `json:"server"`
	Tasks           int       `json:"tasks"`
	Concurrency     int       `json:"concurrency"`
	Rate            float64   `json:"rate"`
	Completed       int       `json:"completed"`
	Errors          int       `json:"errors"`
	FirstError      string    `json:"first_error,omitempty"`
	DurationSec     float64   `json:"duration_sec"`
	TasksPerSec     float64   `json:"tasks_per_sec"`
	P50Ms           float64   `json:"p50_ms"`
	P99Ms           float64   `json:"p99_ms"`
	MaxMs           float64   `json:"max_ms"`
	ServerCPUSec    float64   `json:"server_cpu_sec,omitempty"`
	ServerCPUPerWf  float64   `json:"server_cpu_us_per_task,omitempty"`
	ServerIdleRSSMB float64   `json:"server_idle_rss_mb,omitempty"`
	ServerRSSMB     []float64 `json:"server_loaded_rss_mb,omitempty"`
	ServerPeakRSSMB float64   `json:"server_peak_rss_mb,omitempty"`
}

func main() {
	var (
		addr        = flag.String("address", "127.0.0.1:7233", "Temporal frontend address")
		tasks       = flag.Int("tasks", 2000, "workflows to complete")
		concurrency = flag.Int("concurrency", 128, "closed loop: workflows in flight")
		rate        = flag.Float64("rate", 0, "open loop: workflows started per second (0: closed loop)")
		duration    = flag.Duration("duration", 0, "stop starting workflows after this long (0: after -tasks)")
		pid         = flag.Int("server-pid", 0, "process id of the server, for its CPU and RSS (Linux /proc)")
		maxDur      = flag.Duration("max-duration", 10*time.Minute, "give up after this long")
	)
	flag.Parse()
	if err := run(*addr, *tasks, *concurrency, *rate, *duration, *pid, *maxDur); err != nil {
		fmt.Fprintln(os.Stderr, "bench-temporal:", err)
		os.Exit(1)
	}
}

func run(addr string, tasks, concurrency int, rate float64, duration time.Duration, pid int, maxDur time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), maxDur)
	defer cancel()
	quiet := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	c, err := client.Dial(client.Options{HostPort: addr, Logger: quiet})
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	w := worker.New(c, queue, worker.Options{MaxConcurrentActivityExecutionSize: 1024, MaxConcurrentWorkflowTaskExecutionSize: 1024})
	w.RegisterWorkflow(OneStep)
	w.RegisterActivity(NoopActivity)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()

	rep := report{Server: addr, Tasks: tasks, Concurrency: concurrency, Rate: rate}
	if pid > 0 {
		rep.ServerIdleRSSMB = rssMB(pid, "VmRSS")
	}
	cpu0 := cpuSec(pid)
	stopRSS := sampleRSS(pid, &rep.ServerRSSMB)

	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
		wg   sync.WaitGroup
	)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	over := func() bool { return duration > 0 && time.Since(start) > duration }
	one := func(i int64) {
		began := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("b-%s-%07d", runID, i), TaskQueue: queue}, OneStep)
		if err == nil {
			err = run.Get(ctx, nil)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			rep.Errors++
			if rep.FirstError == "" {
				rep.FirstError = err.Error()
			}
			return
		}
		lat = append(lat, time.Since(began))
	}
	if rate > 0 {
		for i := int64(0); i < int64(tasks) && !over() && ctx.Err() == nil; i++ {
			if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d) // pacing the open loop
			}
			wg.Go(func() { one(i) })
		}
	} else {
		for range concurrency {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(tasks) && !over() && ctx.Err() == nil; i = next.Add(1) - 1 {
					one(i)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopRSS()

	rep.Completed = len(lat)
	rep.DurationSec = elapsed.Seconds()
	rep.TasksPerSec = float64(len(lat)) / elapsed.Seconds()
	if len(lat) > 0 {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		rep.P50Ms, rep.P99Ms, rep.MaxMs = ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*99/100)]), ms(lat[len(lat)-1])
	}
	if pid > 0 {
		rep.ServerCPUSec = cpuSec(pid) - cpu0
		rep.ServerCPUPerWf = rep.ServerCPUSec / float64(max(1, len(lat))) * 1e6
		rep.ServerPeakRSSMB = rssMB(pid, "VmHWM")
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	if rep.Errors > 0 {
		return fmt.Errorf("%d workflows failed; first: %s", rep.Errors, rep.FirstError)
	}
	return nil
}

// cpuSec is the user+system CPU seconds of process pid (0 when unknown).
func cpuSec(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// rssMB reads a memory field (VmRSS, VmHWM) of process pid in MB.
func rssMB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// sampleRSS appends the server's RSS every 5 s until stopped.
func sampleRSS(pid int, out *[]float64) (stop func()) {
	if pid <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				*out = append(*out, rssMB(pid, "VmRSS"))
			}
		}
	}()
	return func() { close(quit); <-done }
}

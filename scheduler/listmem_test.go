package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// TestListMemory is a benchmark, not a test: it measures what concurrent
// basic-view lists cost the memory of a process that hosts etcd and the
// scheduler, as `reeve dev` does (in-process etcd client), with the
// listing clients in the same process over real gRPC. It runs only with
// REEVE_LIST_MEMORY=1 and reports; it asserts nothing (docs/benchmarks.md,
// "List memory (issue 25)"):
//
//	REEVE_LIST_MEMORY=1 go test -count=1 -run TestListMemory -v -timeout 20m ./scheduler/
//
// Knobs (env): REEVE_LIST_MEMORY_TASKS (1000), REEVE_LIST_MEMORY_INPUT (bytes
// of each input, 60000), REEVE_LIST_MEMORY_CONC (concurrent list loops,
// "20,80"), REEVE_LIST_MEMORY_DURATION (per concurrency, 20s).
func TestListMemory(t *testing.T) {
	if os.Getenv("REEVE_LIST_MEMORY") == "" {
		t.Skip("a benchmark: set REEVE_LIST_MEMORY=1")
	}
	tasks := envInt(t, "REEVE_LIST_MEMORY_TASKS", 1000)
	inputBytes := envInt(t, "REEVE_LIST_MEMORY_INPUT", 60000)
	duration := 20 * time.Second
	if v := os.Getenv("REEVE_LIST_MEMORY_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		duration = d
	}
	concs := []int{20, 80}
	if v := os.Getenv("REEVE_LIST_MEMORY_CONC"); v != "" {
		concs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			concs = append(concs, n)
		}
	}

	etcd := etcdtest.New(t)
	srv := scheduler.New(etcd.InProcessClient(), scheduler.WithLogger(testenv.Logger()))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(scheduler.ServerOptions()...)
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Serve(srv.Listener(lis)) }()
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.Stop() })
	c := reevev1.NewSchedulerServiceClient(testenv.Dial(t, lis.Addr().String()))

	input := benchInput(t, inputBytes)
	t.Logf("input: %d bytes encoded", proto.Size(input))
	start := time.Now()
	var eg errgroup.Group
	eg.SetLimit(8)
	for i := range tasks {
		eg.Go(func() error {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_, err := c.SubmitTask(sctx, &reevev1.SubmitTaskRequest{
				TaskId:   fmt.Sprintf("big-%05d", i),
				Workflow: inline(step("a", "nobody-runs-this"), step("b", "nobody-runs-this", "a")),
				Input:    input,
			})
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d tasks in %v", tasks, time.Since(start).Round(time.Millisecond))

	for range 3 {
		lstart := time.Now()
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		resp, err := c.ListTasks(lctx, &reevev1.ListTasksRequest{PageSize: 1000})
		lcancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("one list alone: %d tasks, %d bytes, in %v", len(resp.GetTasks()), proto.Size(resp), time.Since(lstart).Round(time.Millisecond))
	}
	for _, conc := range concs {
		runtime.GC()
		debug.FreeOSMemory()
		resetPeakRSS(t)
		before := readMem()
		t.Logf("conc %d: before: %s", conc, before)
		peak, stats := listLoad(c, conc, duration)
		after := readMem()
		t.Logf("conc %d: after %v: %s", conc, duration, after)
		t.Logf("conc %d: peak: VmHWM %d MB (growth %d MB), RssAnon %d MB, RssFile %d MB, Go heap objects %d MB, heap goal %d MB, Go total %d MB",
			conc, peak.hwm>>20, (peak.hwm-before.rss)>>20, peak.anon>>20, peak.file>>20, peak.heap>>20, peak.goal>>20, peak.goTotal>>20)
		t.Logf("conc %d: %d list calls (%d pages of tasks, %d tasks listed, %d full lists), %d refused RESOURCE_EXHAUSTED, %d other errors",
			conc, stats.calls.Load(), stats.pages.Load(), stats.listed.Load(), stats.lists.Load(), stats.refused.Load(), stats.errors.Load())
	}
}

type listStats struct{ calls, pages, listed, lists, refused, errors atomic.Int64 }

// listLoad runs conc loops that each list every task page by page
// (page_size 1000, basic view) for d, sampling memory every 50ms; it returns
// the peaks.
func listLoad(c reevev1.SchedulerServiceClient, conc int, d time.Duration) (memSample, *listStats) {
	stats := &listStats{}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := ""
			for ctx.Err() == nil {
				stats.calls.Add(1)
				resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1000, PageToken: tok})
				switch {
				case ctx.Err() != nil:
					return
				case status.Code(err) == codes.ResourceExhausted:
					stats.refused.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				case err != nil:
					stats.errors.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				stats.pages.Add(1)
				stats.listed.Add(int64(len(resp.GetTasks())))
				if tok = resp.GetNextPageToken(); tok == "" {
					stats.lists.Add(1)
				}
			}
		}()
	}
	var peak memSample
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		peak = peak.max(readMem())
	}
	wg.Wait()
	return peak.max(readMem()), stats
}

type memSample struct {
	rss, hwm, anon, file         uint64 // /proc/self/status
	heap, goal, goTotal, release uint64 // runtime/metrics
}

func (m memSample) String() string {
	return fmt.Sprintf("VmRSS %d MB (RssAnon %d, RssFile %d), VmHWM %d MB, Go heap objects %d MB, goal %d MB, Go total %d MB, released %d MB",
		m.rss>>20, m.anon>>20, m.file>>20, m.hwm>>20, m.heap>>20, m.goal>>20, m.goTotal>>20, m.release>>20)
}

func (m memSample) max(o memSample) memSample {
	return memSample{max(m.rss, o.rss), max(m.hwm, o.hwm), max(m.anon, o.anon), max(m.file, o.file),
		max(m.heap, o.heap), max(m.goal, o.goal), max(m.goTotal, o.goTotal), max(m.release, o.release)}
}

func readMem() memSample {
	var m memSample
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			m.rss = kb << 10
		case "VmHWM:":
			m.hwm = kb << 10
		case "RssAnon:":
			m.anon = kb << 10
		case "RssFile:":
			m.file = kb << 10
		}
	}
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	m.heap, m.goal, m.goTotal, m.release = s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64()
	return m
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0+).
func resetPeakRSS(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("reset peak RSS: %v", err)
	}
}

// benchInput is a JSON-like order of about n encoded bytes: a list of
// line items, each a struct of a few fields.
func benchInput(t *testing.T, n int) *structpb.Value {
	var items []any
	size := 0
	for i := 0; size < n-200; i++ {
		items = append(items, map[string]any{
			"sku": fmt.Sprintf("SKU-%06d", i), "qty": float64(i % 7), "price": float64(i) * 1.25,
			"note": strings.Repeat("x", 60),
		})
		size += 130
	}
	v, err := structpb.NewValue(map[string]any{"order": "o-1", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	for proto.Size(v) > n {
		l := v.GetStructValue().GetFields()["items"].GetListValue()
		l.Values = l.Values[:len(l.Values)-1]
	}
	return v
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

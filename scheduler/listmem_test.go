package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// TestListMemory is a benchmark, not a test: it measures what concurrent
// basic-view lists cost the memory of a process that hosts etcd and the
// scheduler, as `reeve dev` does (in-process etcd client), listed over real
// gRPC by clients in a child process (TestListMemoryClients). It runs only with
// REEVE_LIST_MEMORY=1 and reports; it asserts nothing (docs/benchmarks.md,
// "List memory (issue 25)"):
//
//	REEVE_LIST_MEMORY=1 go test -count=1 -run '^TestListMemory$' -v -timeout 20m ./scheduler/
//
// Knobs (env): REEVE_LIST_MEMORY_TASKS (1000), REEVE_LIST_MEMORY_INPUT (bytes
// of each input, 60000), REEVE_LIST_MEMORY_CONC (concurrent list loops,
// "20,80"), REEVE_LIST_MEMORY_DURATION (per concurrency, 20s),
// REEVE_LIST_MEMORY_PROFILE (a path: write a heap profile halfway through
// each load, to path.<concurrency>), REEVE_LIST_MEMORY_ETCD=network (the
// scheduler's etcd client over loopback gRPC instead of in process).
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
	cli := etcd.InProcessClient()
	if os.Getenv("REEVE_LIST_MEMORY_ETCD") == "network" {
		// As a `reeve scheduler` talks to etcd (here in the same process).
		var err error
		cli, err = clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: store.DialOptions()})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = cli.Close() }) // before the member stops
	srv := scheduler.New(cli, scheduler.WithLogger(testenv.Logger()))
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
		peak, stats, listed := listLoad(t, lis.Addr().String(), conc, duration)
		after := readMem()
		if listed > 0 {
			t.Logf("conc %d: %d bytes allocated (Go heap) per task listed", conc, (after.allocs-before.allocs)/uint64(listed))
		}
		t.Logf("conc %d: after %v: %s", conc, duration, after)
		t.Logf("conc %d: peak: VmHWM %d MB (growth %d MB), RssAnon %d MB, RssFile %d MB, Go heap objects %d MB, heap goal %d MB, Go total %d MB",
			conc, peak.hwm>>20, (peak.hwm-before.rss)>>20, peak.anon>>20, peak.file>>20, peak.heap>>20, peak.goal>>20, peak.goTotal>>20)
		t.Logf("conc %d: %s", conc, stats)
	}
}

type listStats struct{ calls, pages, listed, lists, refused, errors atomic.Int64 }

func (st *listStats) String() string {
	return fmt.Sprintf("%d list calls (%d pages of tasks, %d tasks listed, %d full lists), %d refused RESOURCE_EXHAUSTED, %d other errors",
		st.calls.Load(), st.pages.Load(), st.listed.Load(), st.lists.Load(), st.refused.Load(), st.errors.Load())
}

// TestListMemoryClients is the listing side of TestListMemory, which runs
// it in a process of its own (REEVE_LIST_MEMORY_ADDR set) so that the
// memory measured is the server's alone.
func TestListMemoryClients(t *testing.T) {
	addr := os.Getenv("REEVE_LIST_MEMORY_ADDR")
	if addr == "" {
		t.Skip("run by TestListMemory")
	}
	d, err := time.ParseDuration(os.Getenv("REEVE_LIST_MEMORY_DURATION"))
	if err != nil {
		t.Fatal(err)
	}
	c := reevev1.NewSchedulerServiceClient(testenv.Dial(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stats := &listStats{}
	runLists(ctx, c, envInt(t, "REEVE_LIST_MEMORY_CONC", 20), stats)
	fmt.Printf("listmem-clients: %d %s\n", stats.listed.Load(), stats)
}

// listLoad runs conc loops that each list every task page by page
// (page_size 1000, basic view) for d in a child process, sampling this
// process's memory every 50ms; it returns the peaks and what the child
// printed of its calls and tasks listed.
func listLoad(t *testing.T, addr string, conc int, d time.Duration) (peak memSample, stats string, listed int64) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestListMemoryClients$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REEVE_LIST_MEMORY_ADDR="+addr, fmt.Sprintf("REEVE_LIST_MEMORY_CONC=%d", conc), "REEVE_LIST_MEMORY_DURATION="+d.String())
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	profile := time.After(d / 2)
	for {
		select {
		case <-profile:
			if path := os.Getenv("REEVE_LIST_MEMORY_PROFILE"); path != "" {
				writeHeapProfile(t, fmt.Sprintf("%s.%d", path, conc))
			}
		case err := <-exited:
			if err != nil {
				t.Fatalf("list clients: %v\n%s", err, out.String())
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if stats, ok := strings.CutPrefix(line, "listmem-clients: "); ok {
					listed, stats, _ := strings.Cut(stats, " ")
					n, _ := strconv.ParseInt(listed, 10, 64)
					if strings.Contains(out.String(), "first error: ") {
						t.Logf("list clients: %s", out.String()[strings.Index(out.String(), "first error: "):])
					}
					return peak.max(readMem()), stats, n
				}
			}
			t.Fatalf("list clients printed no stats:\n%s", out.String())
		case <-tick.C:
			peak = peak.max(readMem())
		}
	}
}

// runLists runs conc loops that each list every task page by page
// (page_size 1000, basic view) until ctx ends.
func runLists(ctx context.Context, c reevev1.SchedulerServiceClient, conc int, stats *listStats) {
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
					if stats.errors.Add(1) == 1 {
						fmt.Printf("first error: %v\n", err)
					}
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
	wg.Wait()
}

type memSample struct {
	rss, hwm, anon, file         uint64 // /proc/self/status
	heap, goal, goTotal, release uint64 // runtime/metrics
	allocs                       uint64 // cumulative, not a peak
}

func (m memSample) String() string {
	return fmt.Sprintf("VmRSS %d MB (RssAnon %d, RssFile %d), VmHWM %d MB, Go heap objects %d MB, goal %d MB, Go total %d MB, released %d MB",
		m.rss>>20, m.anon>>20, m.file>>20, m.hwm>>20, m.heap>>20, m.goal>>20, m.goTotal>>20, m.release>>20)
}

func (m memSample) max(o memSample) memSample {
	return memSample{max(m.rss, o.rss), max(m.hwm, o.hwm), max(m.anon, o.anon), max(m.file, o.file),
		max(m.heap, o.heap), max(m.goal, o.goal), max(m.goTotal, o.goTotal), max(m.release, o.release), max(m.allocs, o.allocs)}
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
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(s)
	m.heap, m.goal, m.goTotal, m.release, m.allocs = s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64(), s[4].Value.Uint64()
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

// writeHeapProfile writes the heap profile (allocations live at the last
// GC) to path.
func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

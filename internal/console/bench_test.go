package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/testenv"
)

// benchTasks is how many tasks the list benchmark stores first
// (REEVE_CONSOLE_BENCH_TASKS, default 100,000).
func benchTasks(b *testing.B) int {
	if v := os.Getenv("REEVE_CONSOLE_BENCH_TASKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 100000
}

// serve runs one request through the console in process and returns the
// status: the time measured is the console's server time, its gRPC calls
// to the scheduler included.
func serve(b *testing.B, h http.Handler, cookie *http.Cookie, path string) int {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func benchConsole(b *testing.B, s *testenv.Scheduler) (http.Handler, *http.Cookie) {
	c, err := console.New(testenv.Dial(b, s.Addr), console.WithLogger(testenv.Logger()))
	if err != nil {
		b.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/workflows", nil))
	for _, ck := range rec.Result().Cookies() {
		return c, ck
	}
	b.Fatal("no session cookie")
	return nil, nil
}

// BenchmarkTasksPage renders the tasks page (first page of 50, newest
// first, with the counts per state) with benchTasks tasks in the store, and
// the same page filtered by workflow and state.
func BenchmarkTasksPage(b *testing.B) {
	s := testenv.New(b).StartScheduler("")
	n := benchTasks(b)
	client := s.Client(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				wf := "bench.a"
				if i%10 == 0 {
					wf = "bench.b"
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "bench", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
					Name: wf, Steps: []*reevev1.StepSpec{{Name: "wait", Type: "bench.nobody"}},
				}}, Input: structpb.NewStringValue(fmt.Sprintf("order %d", i))})
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("stored %d tasks in %s", n, time.Since(start).Round(time.Second))
	h, ck := benchConsole(b, s)
	for _, c := range []struct{ name, path string }{
		{"newest", "/tasks?ns=bench"},
		{"filtered", "/tasks?ns=bench&workflow=bench.b&state=pending"},
		{"prefix", "/tasks?ns=bench&prefix=01"},
		{"counts", "/tasks/counts?ns=bench"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if code := serve(b, h, ck, c.path); code != http.StatusOK {
					b.Fatalf("status %d", code)
				}
			}
		})
	}
}

// BenchmarkTaskPageMaxHistory renders the page of a task at the limits: 100
// steps (each with an output) and a full history of 200 events.
func BenchmarkTaskPageMaxHistory(b *testing.B) {
	s := testenv.New(b).StartScheduler("")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() { cancel(); <-done })
	a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		b.Fatal(err)
	}
	a.Handle("bench.step", func(_ context.Context, st *agentsdk.Step) (any, error) {
		return map[string]string{"result": strings.Repeat("x", 200), "step": st.Name}, nil
	})
	go func() { defer close(done); _ = a.Run(ctx) }()
	var steps []*reevev1.StepSpec
	for i := range 100 {
		st := &reevev1.StepSpec{Name: fmt.Sprintf("s%03d", i), Type: "bench.step", Timeout: durationpb.New(10 * time.Second)}
		if i > 0 {
			st.DependsOn = []string{fmt.Sprintf("s%03d", i-1)}
		}
		steps = append(steps, st)
	}
	client := s.Client(b)
	resp, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "bench.long", Steps: steps}}})
	if err != nil {
		b.Fatal(err)
	}
	id := resp.GetTask().GetId()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := client.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			b.Fatal(err)
		}
		if got.GetTask().GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
			if h := len(got.GetTask().GetHistory()); h != 200 {
				b.Fatalf("history of %d events, want the maximum 200", h)
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("task still %v", got.GetTask().GetState())
		}
		time.Sleep(50 * time.Millisecond)
	}
	h, ck := benchConsole(b, s)
	for _, c := range []struct{ name, path string }{
		{"full", "/tasks/" + id},
		{"failures", "/tasks/" + id + "?failures=1"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if code := serve(b, h, ck, c.path); code != http.StatusOK {
					b.Fatalf("status %d", code)
				}
			}
		})
	}
}

package scheduler_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// submitMany submits n tasks "<prefix>-<i>" of workflow wf with the given
// input, eight at a time.
func submitMany(t *testing.T, c reevev1.SchedulerServiceClient, prefix string, n int, wf string, input *structpb.Value) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, 8)
		errs  = make(chan error, n)
	)
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{
				TaskId:   fmt.Sprintf("%s-%04d", prefix, i),
				Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: wf, Steps: []*reevev1.StepSpec{step("x", "nobody")}}},
				Input:    input,
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
}

// listAll follows page tokens of req to the end, failing on any error, and
// returns the tasks and the number of pages.
func listAll(t *testing.T, c reevev1.SchedulerServiceClient, req *reevev1.ListTasksRequest) ([]*reevev1.Task, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	req = proto.Clone(req).(*reevev1.ListTasksRequest)
	var tasks []*reevev1.Task
	for pages := 1; pages <= 10_000; pages++ {
		resp, err := c.ListTasks(ctx, req)
		if err != nil {
			t.Fatalf("list page %d: %v", pages, err)
		}
		tasks = append(tasks, resp.GetTasks()...)
		if resp.GetNextPageToken() == "" {
			return tasks, pages
		}
		req.PageToken = resp.GetNextPageToken()
	}
	t.Fatal("list: more than 10,000 pages")
	return nil, 0
}

func bigInput(t *testing.T, n int) *structpb.Value {
	return testenv.Value(t, strings.Repeat("x", n))
}

// Tasks with 60 KB inputs: a page of 1,000 of them is 60 MB, far past
// gRPC's 4 MiB default receive limit. The page is cut at the byte budget
// and the token continues it, in both views, and every task comes exactly
// once, newest first.
func TestListTasksLargeTasksPageByByteBudget(t *testing.T) {
	_, _, c := newEnv(t)
	const n = 300
	submitMany(t, c, "big", n, "wf", bigInput(t, 60_000))

	for _, view := range []reevev1.TaskView{reevev1.TaskView_TASK_VIEW_UNSPECIFIED, reevev1.TaskView_TASK_VIEW_FULL} {
		tasks, pages := listAll(t, c, &reevev1.ListTasksRequest{PageSize: 1000, View: view})
		if len(tasks) != n {
			t.Fatalf("view %v: listed %d tasks, want %d", view, len(tasks), n)
		}
		seen := map[string]bool{}
		for i, task := range tasks {
			if seen[task.GetId()] {
				t.Fatalf("view %v: task %s listed twice", view, task.GetId())
			}
			seen[task.GetId()] = true
			if i > 0 && task.GetCreateTime().AsTime().After(tasks[i-1].GetCreateTime().AsTime()) {
				t.Fatalf("view %v: %s created after %s, listed after it: not newest first", view, task.GetId(), tasks[i-1].GetId())
			}
			hasInput := task.GetInput() != nil
			if hasInput != (view == reevev1.TaskView_TASK_VIEW_FULL) {
				t.Fatalf("view %v: task %s has input: %v", view, task.GetId(), hasInput)
			}
		}
		if view == reevev1.TaskView_TASK_VIEW_FULL && pages < n*60_000/(4<<20) {
			t.Fatalf("full view: %d pages for %d tasks of 60 KB: a page is over 4 MiB", pages, n)
		}
		if view != reevev1.TaskView_TASK_VIEW_FULL && pages != 1 {
			t.Fatalf("basic view: %d pages, want the %d small tasks in one", pages, n)
		}
	}
}

// A task larger than the byte budget still goes out, alone on its page.
func TestListTasksTaskLargerThanBudgetGoesAlone(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", schedulerListBytes(10_000)...)
	c := s.Client(t)
	submitMany(t, c, "huge", 3, "wf", bigInput(t, 30_000))
	tasks, pages := listAll(t, c, &reevev1.ListTasksRequest{View: reevev1.TaskView_TASK_VIEW_FULL})
	if len(tasks) != 3 || pages != 3 {
		t.Fatalf("listed %d tasks in %d pages, want 3 in 3", len(tasks), pages)
	}
}

// Concurrent full lists of large tasks keep the server's heap bounded: each
// holds at most a page budget plus one fetch batch, and past the
// concurrency limit a list waits or is refused with RESOURCE_EXHAUSTED.
func TestListTasksConcurrentFullListsBoundHeap(t *testing.T) {
	_, _, c := newEnv(t)
	submitMany(t, c, "mem", 100, "wf", bigInput(t, 60_000))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	var (
		lists   sync.WaitGroup
		refused atomic.Int64
		errs    = make(chan error, 20)
	)
	for range 20 {
		lists.Add(1)
		go func() {
			defer lists.Done()
			errs <- func() error {
				req := &reevev1.ListTasksRequest{PageSize: 1000, View: reevev1.TaskView_TASK_VIEW_FULL}
				for range 1000 {
					resp, err := c.ListTasks(ctx, req)
					if status.Code(err) == codes.ResourceExhausted {
						refused.Add(1)
						continue // retry, as a client with backoff would
					}
					if err != nil {
						return err
					}
					if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
						return nil
					}
				}
				return fmt.Errorf("list did not end")
			}()
		}()
	}
	lists.Wait()
	close(stop)
	sampler.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The client side of this process holds at most 20 pages of 2 MiB at a
	// time; the server at most 8 lists of (2 MiB + 256 KiB of records). Before the
	// budget, each list held its 6 MB page several times over.
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("heap grew by %d MB at peak (%d lists refused and retried)", grew>>20, refused.Load())
	if grew > 200<<20 {
		t.Fatalf("heap grew by %d MB during 20 concurrent full lists, want under 200 MB", grew>>20)
	}
}

// A page token the API did not issue, or issued for other filters, is
// INVALID_ARGUMENT naming page_token, never an empty or a wrong page.
func TestListTasksRefusesForgedPageTokens(t *testing.T) {
	_, _, c := newEnv(t)
	submitMany(t, c, "tok", 3, "wf", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	first, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v; want a next page token", first, err)
	}
	for name, req := range map[string]*reevev1.ListTasksRequest{
		"garbage":                {PageToken: "%%%"},
		"base64 of a task id":    {PageToken: base64.RawURLEncoding.EncodeToString([]byte("tok-0001"))},
		"base64 of nonsense":     {PageToken: base64.RawURLEncoding.EncodeToString([]byte("t1:x:y:z"))},
		"truncated":              {PageToken: first.GetNextPageToken()[:10]},
		"token of other filters": {PageToken: first.GetNextPageToken(), Workflow: "wf"},
		"token of other state":   {PageToken: first.GetNextPageToken(), State: reevev1.TaskState_TASK_STATE_PENDING},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := c.ListTasks(ctx, req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "page_token") {
				t.Fatalf("got %v, %v; want INVALID_ARGUMENT naming page_token", resp, err)
			}
		})
	}
}

// Every filter alone and combined, against what the tasks are: workflow,
// state, task-id prefix and the created time range, newest first.
func TestListTasksFilters(t *testing.T) {
	_, s, c := newEnv(t)
	submitMany(t, c, "a", 5, "alpha", nil)
	submitMany(t, c, "b", 5, "beta", nil)
	// One alpha task runs: RUNNING, the rest PENDING.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "a-run", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{
		InlineWorkflow: &reevev1.Workflow{Name: "alpha", Steps: []*reevev1.StepSpec{step("x", "served")}}}}); err != nil {
		t.Fatal(err)
	}
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 1, "served"))
	agent.NextAssignment(wait)

	all, _ := listAll(t, c, &reevev1.ListTasksRequest{PageSize: 3})
	if len(all) != 11 || all[0].GetId() != "a-run" {
		t.Fatalf("listed %d tasks, first %s; want 11, a-run (the newest) first", len(all), all[0].GetId())
	}
	for i := 1; i < len(all); i++ {
		if all[i].GetCreateTime().AsTime().After(all[i-1].GetCreateTime().AsTime()) {
			t.Fatalf("%s listed after %s but created later", all[i].GetId(), all[i-1].GetId())
		}
	}
	// created range: the middle of the list by create time.
	after, before := all[7].GetCreateTime(), all[2].GetCreateTime()
	ids := func(tasks []*reevev1.Task) string {
		var out []string
		for _, task := range tasks {
			out = append(out, task.GetId())
		}
		return strings.Join(out, ",")
	}
	want := func(keep func(*reevev1.Task) bool) string {
		var out []*reevev1.Task
		for _, task := range all {
			if keep(task) {
				out = append(out, task)
			}
		}
		return ids(out)
	}
	running := reevev1.TaskState_TASK_STATE_RUNNING
	pending := reevev1.TaskState_TASK_STATE_PENDING
	for _, tc := range []struct {
		name string
		req  *reevev1.ListTasksRequest
		keep func(*reevev1.Task) bool
	}{
		{"workflow", &reevev1.ListTasksRequest{Workflow: "beta"}, func(t *reevev1.Task) bool { return t.GetWorkflow().GetName() == "beta" }},
		{"state", &reevev1.ListTasksRequest{State: running}, func(t *reevev1.Task) bool { return t.GetState() == running }},
		{"workflow and state", &reevev1.ListTasksRequest{Workflow: "alpha", State: pending}, func(t *reevev1.Task) bool {
			return t.GetWorkflow().GetName() == "alpha" && t.GetState() == pending
		}},
		{"prefix", &reevev1.ListTasksRequest{TaskIdPrefix: "b-000"}, func(t *reevev1.Task) bool { return strings.HasPrefix(t.GetId(), "b-000") }},
		{"created range", &reevev1.ListTasksRequest{CreatedAfter: after, CreatedBefore: before}, func(t *reevev1.Task) bool {
			ct := t.GetCreateTime().AsTime()
			return !ct.Before(after.AsTime()) && ct.Before(before.AsTime())
		}},
		{"created range and workflow", &reevev1.ListTasksRequest{CreatedAfter: after, CreatedBefore: before, Workflow: "alpha"}, func(t *reevev1.Task) bool {
			ct := t.GetCreateTime().AsTime()
			return !ct.Before(after.AsTime()) && ct.Before(before.AsTime()) && t.GetWorkflow().GetName() == "alpha"
		}},
		{"no match", &reevev1.ListTasksRequest{Workflow: "gamma"}, func(*reevev1.Task) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.PageSize = 2
			got, _ := listAll(t, c, tc.req)
			if w := want(tc.keep); ids(got) != w || w == "" && tc.name != "no match" {
				t.Fatalf("listed %q, want %q", ids(got), w)
			}
		})
	}
	// Bad filters change nothing and name their field.
	for field, req := range map[string]*reevev1.ListTasksRequest{
		"workflow":       {Workflow: "no/slash"},
		"task_id_prefix": {TaskIdPrefix: "-x"},
		"created_after":  {CreatedAfter: &timestamppb.Timestamp{Nanos: -1}},
		"view":           {View: 99},
	} {
		_, err := c.ListTasks(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT naming it", field, err)
		}
	}
}

func schedulerListBytes(n int) []scheduler.Option {
	return []scheduler.Option{scheduler.WithListBytes(n)}
}

// testenvConnect connects an agent of typ and waits for its first
// assignment, so that one task is RUNNING.
func testenvConnect(t *testing.T, addr, typ string) {
	t.Helper()
	agent := testenv.ConnectRaw(t, addr, register("counter", 1, typ))
	agent.NextAssignment(wait)
}

// Workflows of 190 KB each: a page of them is cut at the byte budget and
// every one is listed exactly once; a forged page token is refused.
func TestListWorkflowsPagesByByteBudget(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	const n = 14
	for i := range n {
		var steps []*reevev1.StepSpec
		for j := range 12 {
			st := step(fmt.Sprintf("s%d", j), "t")
			st.Config = testenv.Value(t, strings.Repeat("c", 15_000))
			steps = append(steps, st)
		}
		if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: fmt.Sprintf("big-%02d", i), Steps: steps}}); err != nil {
			t.Fatal(err)
		}
	}
	req := &reevev1.ListWorkflowsRequest{PageSize: 1000}
	seen := map[string]bool{}
	pages := 0
	for range 100 {
		resp, err := c.ListWorkflows(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		for _, w := range resp.GetWorkflows() {
			if seen[w.GetName()] {
				t.Fatalf("%s listed twice", w.GetName())
			}
			seen[w.GetName()] = true
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(seen) != n || pages < 2 {
		t.Fatalf("listed %d workflows in %d pages, want %d in at least 2", len(seen), pages, n)
	}
	_, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{PageToken: base64.RawURLEncoding.EncodeToString([]byte("../x"))})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "page_token") {
		t.Fatalf("forged token: %v, want INVALID_ARGUMENT naming page_token", err)
	}
}

// A page size over the maximum is lowered to it on every list (AIP-158),
// never refused.
func TestPageSizeOverTheMaximumIsLowered(t *testing.T) {
	_, s, c := newEnv(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	submitMany(t, c, "big", 3, "wf", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tasks, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1 << 30})
	if err != nil || len(tasks.GetTasks()) != 3 {
		t.Fatalf("ListTasks: %d tasks, %v; want 3", len(tasks.GetTasks()), err)
	}
	if _, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{PageSize: 1 << 30}); err != nil {
		t.Fatalf("ListWorkflows: %v", err)
	}
	if _, err := sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{PageSize: 1 << 30}); err != nil {
		t.Fatalf("ListAlerts: %v", err)
	}
}

package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// xss is text a user controls (task input, an agent's error message) that
// would run if the console did not escape it.
const xss = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`

// env is a real etcd, scheduler, supervisor and demo agent, and a console in
// front of them on a loopback HTTP port.
type env struct {
	t       *testing.T
	sched   reevev1.SchedulerServiceClient
	sup     reevev1.SupervisorServiceClient
	url     string
	etcd    *clientv3.Client // nil in secure mode
	addr    string           // the scheduler's; "" in secure mode
	archive archive.Archive  // the scheduler's (newArchiveEnv), else nil
}

// newEnv starts everything; the demo agent also serves test.fail_xss (fails
// permanently with xss as the error message).
func newEnv(t *testing.T, opts ...console.Option) *env {
	t.Helper()
	return newEnvWith(t, nil, opts...)
}

// newArchiveEnv is newEnv with an archive of finished tasks: an SQLite file
// in a temporary directory that the scheduler moves every ended task to at
// once (grace 0; FAILED tasks stay in etcd for the retention), looking every
// 50ms.
func newArchiveEnv(t *testing.T, opts ...console.Option) *env {
	t.Helper()
	return newArchiveEnvWith(t, nil, opts...)
}

// newArchiveEnvWith is newArchiveEnv with more scheduler options.
func newArchiveEnvWith(t *testing.T, schedOpts []scheduler.Option, opts ...console.Option) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := archive.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "archive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() }) // after the scheduler stopped (cleanups run last first)
	e := newEnvWith(t, append([]scheduler.Option{scheduler.WithArchive(a, 0), scheduler.WithArchiveInterval(50 * time.Millisecond)}, schedOpts...), opts...)
	e.archive = a
	return e
}

func newEnvWith(t *testing.T, schedOpts []scheduler.Option, opts ...console.Option) *env {
	t.Helper()
	e := testenv.New(t)
	s := e.StartScheduler("", schedOpts...)
	e.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	for _, w := range demo.Workflows() {
		if _, err := s.SchedulerService().RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID("demo-agent"), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	demo.Register(a)
	a.Handle("test.fail_xss", func(context.Context, *agentsdk.Step) (any, error) {
		return nil, agentsdk.Permanent(errors.New(xss))
	})
	go func() { defer close(done); _ = a.Run(ctx) }()
	cc := testenv.Dial(t, s.Addr)
	env := newEnvOn(t, cc, opts...)
	env.etcd, env.addr = e.Etcd.Client(), s.Addr
	return env
}

func newEnvOn(t *testing.T, cc grpc.ClientConnInterface, opts ...console.Option) *env {
	t.Helper()
	c, err := console.New(cc, append([]console.Option{console.WithLogger(testenv.Logger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(c)
	t.Cleanup(hs.Close)
	return &env{t: t, sched: reevev1.NewSchedulerServiceClient(cc), sup: reevev1.NewSupervisorServiceClient(cc), url: hs.URL}
}

func (e *env) submit(req *reevev1.SubmitTaskRequest) *reevev1.Task {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.sched.SubmitTask(ctx, req)
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return resp.GetTask()
}

// waitState waits (at most a minute) until the task reaches state.
func (e *env) waitState(id string, state reevev1.TaskState) *reevev1.Task {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := e.sched.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		cancel()
		if err == nil && resp.GetTask().GetState() == state {
			return resp.GetTask()
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s: want %v, have %v (err %v)", id, state, resp.GetTask().GetState(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitArchived waits (at most a minute) until the task has left etcd, and
// checks that the archive holds it in state.
func (e *env) waitArchived(id string, state reevev1.TaskState) {
	e.t.Helper()
	key := "/reeve/tasks/default/" + id // the store's key of the task's record (internal/store/keys.go)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := e.etcd.Get(ctx, key, clientv3.WithCountOnly())
		cancel()
		if err == nil && resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s: still in etcd after a minute (err %v)", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at, err := e.archive.Get(ctx, "default", id)
	if err != nil {
		e.t.Fatalf("task %s left etcd but the archive does not hold it: %v", id, err)
	}
	if at.State != state {
		e.t.Fatalf("task %s archived in state %v, want %v", id, at.State, state)
	}
}

// failing is an inline workflow whose only step fails permanently with xss
// and escalates to FAILED.
func failing(input *structpb.Value) *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Input: input, Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.failing", Steps: []*reevev1.StepSpec{{Name: "ship", Type: "test.fail_xss", Timeout: durationpb.New(10 * time.Second)}},
	}}}
}

// stuck is an inline workflow whose step type no agent serves: it stays
// queued (PENDING) until canceled.
func stuck() *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "test.stuck", Steps: []*reevev1.StepSpec{{Name: "wait", Type: "test.nobody"}},
	}}}
}

func ref(name string) *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: name}},
		Input: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"order_id": structpb.NewStringValue("o-1")}})}
}

// browser is an HTTP client with a cookie jar, as a browser keeps the
// session cookie.
type browser struct {
	t *testing.T
	c *http.Client
	e *env
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, c: &http.Client{Jar: jar, Timeout: 20 * time.Second}}
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.e.url + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// post sends a form as the console's own page would, with origin as the
// Origin header ("" for none).
func (b *browser) post(path, origin string, form url.Values) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.e.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf(?:" value|-token" content)="([^"]+)"`)

// csrf returns the csrf token of a page the console rendered.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in the page")
	}
	return m[1]
}

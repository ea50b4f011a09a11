package scheduler_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// recvChanged receives the next event and fails unless it is a change of
// task id.
func recvChanged(t *testing.T, w reevev1.SchedulerService_WatchTasksClient, id string) *reevev1.TaskChanged {
	t.Helper()
	for range 100 {
		m, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		c := m.GetChanged()
		if c == nil {
			t.Fatalf("watch: got %v, want a change of %s", m, id)
		}
		if c.GetTask().GetId() == id {
			return c
		}
	}
	t.Fatalf("watch: no change of %s in 100 events", id)
	return nil
}

// A namespace-wide watch from a list's revision sees every later change,
// in the basic view unless asked for the full one, and only of its
// namespace.
func TestWatchTasksFromListRevision(t *testing.T) {
	_, _, c := newEnv(t)
	submitMany(t, c, "before", 2, "wf", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	basic, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	full, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision(), View: reevev1.TaskView_TASK_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "other", TaskId: "elsewhere", Workflow: inline(step("x", "t"))}); err != nil {
		t.Fatal(err)
	}
	submitMany(t, c, "after", 1, "wf", bigInput(t, 1000))
	got := recvChanged(t, basic, "after-0000")
	if got.GetTask().GetInput() != nil || got.GetRevision() <= list.GetRevision() || got.GetDeleted() {
		t.Fatalf("basic watch got %v, want after-0000 without its input, after revision %d", got, list.GetRevision())
	}
	if got := recvChanged(t, full, "after-0000"); got.GetTask().GetInput() == nil {
		t.Fatalf("full watch got %v without its input", got)
	}
	// Nothing of the other namespace came (recvChanged fails on any other
	// id only after 100 events; check the first event directly instead).
	again, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := again.Recv()
	if err != nil || m.GetChanged().GetTask().GetId() != "after-0000" {
		t.Fatalf("first event after revision %d: %v, %v; want after-0000 (not the other namespace's task)", list.GetRevision(), m, err)
	}
}

// After etcd compacted past the client's revision the watch starts with a
// reset at the current revision, then changes follow.
func TestWatchTasksResetAfterCompaction(t *testing.T) {
	env, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submitMany(t, c, "old", 1, "wf", nil)
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	submitMany(t, c, "missed", 3, "wf", nil)
	cli := env.Etcd.Client()
	// A write after the missed ones, so that the compaction passes the
	// revision the watch resumes from (list revision + 1) whatever the
	// batching of the submissions.
	cur, err := cli.Put(ctx, "compact-probe", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	t.Logf("list revision %d, compacted at %d", list.GetRevision(), cur.Header.Revision)
	w, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.GetReset_() == nil || m.GetReset_().GetRevision() < cur.Header.Revision {
		t.Fatalf("first event %v, want a reset at revision %d or later", m, cur.Header.Revision)
	}
	submitMany(t, c, "new", 1, "wf", nil)
	if got := recvChanged(t, w, "new-0000"); got.GetRevision() <= m.GetReset_().GetRevision() {
		t.Fatalf("change at revision %d, not after the reset's %d", got.GetRevision(), m.GetReset_().GetRevision())
	}
}

// A full-view watcher that stops reading while large tasks change: the
// scheduler holds at most WithWatchBufferBytes of changes for it (not 1,024
// tasks of up to 1 MiB each), then ends the stream with RESOURCE_EXHAUSTED
// naming the revision to resume from. Small changes stay within the bound:
// a watcher as slow gets every one of them.
func TestWatchTasksBoundsWhatASlowClientHoldsInBytes(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithWatchBufferBytes(1<<20))
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()

	// The slow client's connection stops reading its socket while paused:
	// HTTP/2 flow control (fixed 64 KiB windows, no growth by bandwidth
	// estimation) then keeps the changes on the scheduler's side.
	var conn pausableConn
	slow := reevev1.NewSchedulerServiceClient(testenv.DialWith(t, s.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithContextDialer(conn.dial)))
	// watchWhilePaused opens a full-view watch, checks it is live, pauses the
	// connection, submits n tasks with inputs of size bytes, waits until a
	// watcher that reads saw them all, and resumes the connection.
	watchWhilePaused := func(prefix string, n, size int) reevev1.SchedulerService_WatchTasksClient {
		list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		req := &reevev1.WatchTasksRequest{StartRevision: list.GetRevision(), View: reevev1.TaskView_TASK_VIEW_FULL}
		w, err := slow.WatchTasks(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// The basic view (no input) keeps this reading watcher's changes
		// small, far within the bound whatever its pace.
		fast, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: req.GetStartRevision()})
		if err != nil {
			t.Fatal(err)
		}
		submitMany(t, c, prefix+"-live", 1, "wf", nil)
		recvChanged(t, w, prefix+"-live-0000")
		sawAll := make(chan error, 1)
		go func() {
			for seen := map[string]bool{}; len(seen) < n; {
				m, err := fast.Recv()
				if err != nil {
					sawAll <- err
					return
				}
				if id := m.GetChanged().GetTask().GetId(); strings.HasPrefix(id, prefix+"-0") {
					seen[id] = true
				}
			}
			sawAll <- nil
		}()
		conn.pause()
		defer conn.resume()
		submitMany(t, c, prefix, n, "wf", bigInput(t, size))
		if err := <-sawAll; err != nil {
			t.Fatalf("reading watcher: %v", err)
		}
		return w
	}

	small := watchWhilePaused("small", 40, 100)
	for i := range 40 {
		if m, err := small.Recv(); err != nil || m.GetChanged() == nil {
			t.Fatalf("small change %d: %v %v", i, m, err)
		}
	}

	big := watchWhilePaused("big", 40, 60_000) // 2.4 MB of changes
	got := 0
	for {
		m, err := big.Recv()
		if err != nil {
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "watch again from revision") {
				t.Fatalf("after %d changes: %v, want RESOURCE_EXHAUSTED naming the revision to resume from", got, err)
			}
			break
		}
		if m.GetChanged() == nil {
			t.Fatalf("got %v", m)
		}
		if got++; got == 40 {
			t.Fatal("all 40 changes (2.4 MB) were held for a client that did not read")
		}
	}
	// 1 MiB holds 17 of them; a few more were on their way under the
	// windows when the connection paused.
	if got > 22 {
		t.Fatalf("%d changes sent before the stream ended; want about 17 (1 MiB of 60 KB changes)", got)
	}
	t.Logf("the stream ended after %d changes of 60 KB", got)
}

// WatchTask to a client that stops reading while its task changes 40
// times: the scheduler keeps only the newest state for it (not every change
// in etcd's watch buffer), and once the client reads again it gets a few
// states ending with the terminal one.
func TestWatchTaskGivesASlowClientTheNewestState(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	var conn pausableConn
	slow := reevev1.NewSchedulerServiceClient(testenv.DialWith(t, s.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithContextDialer(conn.dial)))
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()

	st := step("x", "t")
	st.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 100, InitialBackoff: durationpb.New(0)}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "busy", Workflow: inline(st), Input: bigInput(t, 60_000)})
	w, err := slow.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	// A client that keeps up: when it has the final state, the scheduler
	// has read every change from etcd, whose watch may deliver them well
	// after the results that made them were acknowledged.
	fast, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	conn.pause()
	defer conn.resume()
	agent := testenv.ConnectRaw(t, s.Addr, register("a", 1, "t"))
	const failures = 40
	for i := range failures + 1 {
		as := agent.NextAssignment(wait)
		var ack *reevev1.ResultAck
		if i < failures {
			ack = agent.Fail(as.GetRef(), &reevev1.StepError{Message: "again"})
		} else {
			ack = agent.Succeed(as.GetRef(), nil)
		}
		if !ack.GetAccepted() {
			t.Fatalf("result %d refused: %s", i, ack.GetStatus().GetMessage())
		}
	}
	for {
		m, err := fast.Recv()
		if err != nil {
			t.Fatalf("the client that keeps up: %v", err)
		}
		if m.GetTask().GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
			break
		}
	}
	conn.resume()

	var states []reevev1.TaskState
	for {
		m, err := w.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d states: %v", len(states), err)
		}
		states = append(states, m.GetTask().GetState())
	}
	t.Logf("%d states after the pause", len(states))
	// What was under the 64 KiB windows or being read when the client
	// paused (a few states of this 60 KB task), the one being sent, and the
	// newest: a handful (5 seen under -race), against all 80+ before.
	if n := len(states); n == 0 || n > 10 || states[n-1] != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("got %d states after the pause (%v); want a few, ending SUCCEEDED (the task changed %d+ times)", n, states, 2*failures)
	}
}

// pausableConn dials connections whose reads block while paused.
type pausableConn struct {
	mu     sync.Mutex
	paused chan struct{} // closed by resume; nil while not paused
}

func (p *pausableConn) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &pausingConn{Conn: c, p: p}, nil
}

func (p *pausableConn) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = make(chan struct{})
}

func (p *pausableConn) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

type pausingConn struct {
	net.Conn
	p *pausableConn
}

func (c *pausingConn) Read(b []byte) (int, error) {
	c.p.mu.Lock()
	wait := c.p.paused
	c.p.mu.Unlock()
	if wait != nil {
		<-wait
	}
	return c.Conn.Read(b)
}

func TestWatchTasksRefusesBadRequests(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for field, req := range map[string]*reevev1.WatchTasksRequest{
		"start_revision": {StartRevision: -1},
		"view":           {View: 7},
		"namespace":      {Namespace: "a/b"},
	} {
		w, err := c.WatchTasks(ctx, req)
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT", field, err)
		}
	}
}

// Counts per state come from the state indexes, for the namespace or one
// workflow of it, with every state present.
func TestCountTasksByState(t *testing.T) {
	_, s, c := newEnv(t)
	submitMany(t, c, "p", 3, "alpha", nil)
	submitMany(t, c, "q", 2, "beta", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "r", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{
		InlineWorkflow: &reevev1.Workflow{Name: "alpha", Steps: []*reevev1.StepSpec{step("x", "served")}}}}); err != nil {
		t.Fatal(err)
	}
	testenvConnect(t, s.Addr, "served")
	for _, tc := range []struct {
		wf               string
		pending, running int64
	}{{"", 5, 1}, {"alpha", 3, 1}, {"beta", 2, 0}, {"gamma", 0, 0}} {
		resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Workflow: tc.wf})
		if err != nil {
			t.Fatal(err)
		}
		by := map[reevev1.TaskState]int64{}
		for i, sc := range resp.GetCounts() {
			by[sc.GetState()] = sc.GetCount()
			if want := reevev1.TaskState(i + 1); sc.GetState() != want {
				t.Errorf("workflow %q: count %d is of %v, want %v (enum order)", tc.wf, i, sc.GetState(), want)
			}
			if old := resp.GetByState()[sc.GetState().String()]; old != sc.GetCount() {
				t.Errorf("workflow %q: deprecated by_state says %d %v, counts %d", tc.wf, old, sc.GetState(), sc.GetCount())
			}
		}
		if by[reevev1.TaskState_TASK_STATE_PENDING] != tc.pending || by[reevev1.TaskState_TASK_STATE_RUNNING] != tc.running || len(by) != 7 {
			t.Errorf("workflow %q: counts %v, want %d pending, %d running, 7 states", tc.wf, by, tc.pending, tc.running)
		}
	}
	if _, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Workflow: "a/b"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad workflow: %v, want INVALID_ARGUMENT", err)
	}
}

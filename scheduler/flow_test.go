package scheduler_test

import (
	"context"

	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Flow control (issue 36): max_running across schedulers, freed slots,
// limit changes, pauses.

func queues(t *testing.T, s *testenv.Scheduler) reevev1.QueueServiceClient {
	t.Helper()
	return reevev1.NewQueueServiceClient(testenv.Dial(t, s.Addr))
}

func setLimit(t *testing.T, q reevev1.QueueServiceClient, req *reevev1.SetQueueLimitRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := q.SetQueueLimit(ctx, req); err != nil {
		t.Fatalf("set queue limit: %v", err)
	}
}

// waitApplied waits until the scheduler behind q applies a max_running
// limit of max on typ (its dispatcher counts the type's slots).
func waitApplied(t *testing.T, q reevev1.QueueServiceClient, typ string, max int32) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
		cancel()
		if err != nil {
			t.Fatalf("list queues: %v", err)
		}
		for _, qu := range resp.GetQueues() {
			if qu.GetType() == typ && qu.GetRunningCounted() && qu.GetConfig().GetMaxRunning() == max {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit %d on %s not applied after %s: %v", max, typ, wait, resp.GetQueues())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slotWatch follows the slot keys of one type in etcd and records the
// most held at any revision.
type slotWatch struct {
	mu   sync.Mutex
	held map[string]bool
	max  int
}

func watchSlots(t *testing.T, env *testenv.Env, typ string) *slotWatch {
	t.Helper()
	cli := env.Etcd.Client()
	prefix := "/reeve/slots/default/" + typ + "/"
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &slotWatch{held: map[string]bool{}}
	for _, kv := range resp.Kvs {
		w.held[string(kv.Key)] = true
	}
	w.max = len(w.held)
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range wch {
			w.mu.Lock()
			// Every event of a response up to a revision change is applied
			// before counting: one transaction may free a slot and take
			// another.
			for i, e := range wr.Events {
				if e.Type == mvccpb.DELETE {
					delete(w.held, string(e.Kv.Key))
				} else {
					w.held[string(e.Kv.Key)] = true
				}
				if i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != e.Kv.ModRevision {
					w.max = max(w.max, len(w.held))
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *slotWatch) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// waitState waits until every task of ids is in state.
func waitStates(t *testing.T, c reevev1.SchedulerServiceClient, ids []string, state reevev1.TaskState, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		got := getTask(t, c, id)
		for got.GetState() != state && !taskstate.TerminalTask(got.GetState()) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			got = getTask(t, c, id)
		}
		if got.GetState() != state {
			t.Fatalf("task %s is %s, want %s", id, got.GetState(), state)
		}
	}
}

// max_running holds cluster-wide with two schedulers, also while the one
// that dispatched the running attempts dies: they hold their slots until
// they are known ended (their agent's result through the other scheduler,
// or their recovery at complete-by), the other scheduler starts none
// meanwhile, and every task still runs to the end.
func TestMaxRunningHoldsAcrossSchedulersAndFailover(t *testing.T) {
	const (
		limit = 3
		tasks = 40
	)
	env, s1, c1 := newEnv(t)
	s2 := env.StartScheduler("")
	q1, q2 := queues(t, s1), queues(t, s2)
	setLimit(t, q1, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: limit})
	waitApplied(t, q1, "erp", limit)
	waitApplied(t, q2, "erp", limit)
	env.StartSupervisor([]*testenv.Scheduler{s1})
	slots := watchSlots(t, env, "erp")

	var running, most, ran atomic.Int64
	gate := make(chan struct{}) // the first steps run until the test opens it
	start := func(id string, addrs ...string) {
		a, err := agentsdk.New(addrs, agentsdk.WithAgentID(id), agentsdk.WithMaxConcurrentSteps(8),
			agentsdk.WithLogger(testenv.Logger()), agentsdk.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		a.Handle("erp", func(ctx context.Context, _ *agentsdk.Step) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			ran.Add(1)
			return map[string]any{"ok": true}, nil
		})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	// b serves s2 (and would reconnect to s1); a serves s1 only.
	start("b", s2.Addr, s1.Addr)
	waitAgents(t, s2.Client(t), 1)
	var ids []string
	for i := range tasks {
		c := c1
		if i%2 == 1 {
			c = s2.Client(t)
		}
		ids = append(ids, submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(&reevev1.StepSpec{Name: "a", Type: "erp",
			Timeout: durationpb.New(3 * time.Second), RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 5}})}).GetId())
	}
	// b runs 3 steps: the limit binds.
	for deadline := time.Now().Add(wait); running.Load() < limit; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d running after %s; want %d", running.Load(), wait, limit)
		}
	}
	// a joins on s1, which sees the type at its limit; then s2 dies with
	// b's 3 attempts running.
	start("a", s1.Addr)
	waitAgents(t, c1, 1)
	s2.Kill()
	close(gate)
	waitStates(t, c1, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, time.Minute)

	if got := slots.most(); got != limit {
		t.Errorf("etcd held at most %d slots of erp at once; want the limit, %d", got, limit)
	}
	if got := most.Load(); got > limit {
		t.Errorf("the agents ran %d erp steps at once; the limit is %d", got, limit)
	}
	t.Logf("slots held at most %d, agents ran at most %d at once, %d runs", slots.most(), most.Load(), ran.Load())
}

// A freed slot is taken at once by a waiting step; lowering the limit
// below the running count lets the running attempts finish and starts none
// until under the limit; raising it starts more.
func TestMaxRunningFreedSlotAndLimitChanges(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 2})
	waitApplied(t, q, "erp", 2)
	slots := watchSlots(t, env, "erp")
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	var ids []string
	for range 6 {
		ids = append(ids, submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId())
	}
	first, second := a.NextAssignment(wait), a.NextAssignment(wait)
	a.Quiet(300 * time.Millisecond)

	// A queued task says why it waits.
	var queued string
	for _, id := range ids {
		if id != first.GetRef().GetTaskId() && id != second.GetRef().GetTaskId() {
			queued = id
			break
		}
	}
	if why := stepOf(getTask(t, c, queued), "a").GetWaitReason(); why != "waiting: erp is at its limit 2/2" {
		t.Errorf("wait reason %q", why)
	}
	resp, err := q.ListQueues(context.Background(), &reevev1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetQueues()) != 1 || resp.GetQueues()[0].GetQueued() != 4 || resp.GetQueues()[0].GetRunning() != 2 || resp.GetQueues()[0].GetAgents() != 1 {
		t.Errorf("queues %v; want erp with 4 queued, 2 running, 1 agent", resp.GetQueues())
	}

	// The slot the first frees goes to the next step.
	a.Succeed(first.GetRef(), nil)
	third := a.NextAssignment(wait)
	a.Quiet(200 * time.Millisecond)

	// Lowered to 1 with 2 running: none starts when one ends...
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 1})
	waitApplied(t, q, "erp", 1)
	a.Succeed(second.GetRef(), nil)
	a.Quiet(300 * time.Millisecond)
	// ...one does when both ended.
	a.Succeed(third.GetRef(), nil)
	fourth := a.NextAssignment(wait)
	a.Quiet(300 * time.Millisecond)

	// Raised to 3: two more start.
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 3})
	fifth, sixth := a.NextAssignment(wait), a.NextAssignment(wait)
	for _, as := range []*reevev1.StepAssignment{fourth, fifth, sixth} {
		a.Succeed(as.GetRef(), nil)
	}
	waitStates(t, c, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	if got := slots.most(); got > 3 {
		t.Errorf("%d slots held at once, never more than 3 allowed", got)
	}
}

// A paused type dispatches nothing, its steps stay queued and say why;
// resumed, they run.
func TestPausedQueue(t *testing.T) {
	_, s, c := newEnv(t)
	q := queues(t, s)
	ids := []string{
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId(),
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId(),
	}
	ctx := context.Background()
	if _, err := q.PauseQueue(ctx, &reevev1.PauseQueueRequest{Type: "erp"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		why := stepOf(getTask(t, c, ids[0]), "a").GetWaitReason()
		if why == "waiting: queue erp is paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait reason %q", why)
		}
	}
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	a.Quiet(300 * time.Millisecond)
	resp, err := q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetQueues()) != 1 || !resp.GetQueues()[0].GetConfig().GetPaused() || resp.GetQueues()[0].GetQueued() != 2 {
		t.Fatalf("queues %v; want erp paused with 2 queued", resp.GetQueues())
	}
	if _, err := q.ResumeQueue(ctx, &reevev1.ResumeQueueRequest{Type: "erp"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	}
	waitStates(t, c, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	// Resumed with no limit left: the type has no settings any more.
	resp, err = q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetQueues()) != 1 || resp.GetQueues()[0].GetConfig() != nil {
		t.Errorf("queues %v; want erp without settings", resp.GetQueues())
	}
}

// Bad limits are refused with the field named, and change nothing.
func TestSetQueueLimitRefusals(t *testing.T) {
	_, s, _ := newEnv(t)
	q := queues(t, s)
	for _, tc := range []struct {
		req   *reevev1.SetQueueLimitRequest
		field string
	}{
		{&reevev1.SetQueueLimitRequest{MaxRunning: 1}, "type"},
		{&reevev1.SetQueueLimitRequest{Type: "a/b", MaxRunning: 1}, "type"},
		{&reevev1.SetQueueLimitRequest{Type: "x", MaxRunning: -1}, "max_running"},
		{&reevev1.SetQueueLimitRequest{Type: "x"}, "max_running"},
		{&reevev1.SetQueueLimitRequest{Type: "x", Rate: -2}, "rate"},
		{&reevev1.SetQueueLimitRequest{Type: "x", MaxRunning: 1, Burst: 3}, "burst"},
		{&reevev1.SetQueueLimitRequest{Type: "x", MaxRunning: 1, Clear: true}, "clear"},
		{&reevev1.SetQueueLimitRequest{Namespace: "Bad_NS", Type: "x", MaxRunning: 1}, "namespace"},
	} {
		_, err := q.SetQueueLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
			t.Errorf("%v: %v; want INVALID_ARGUMENT naming %s", tc.req, err, tc.field)
		}
	}
	resp, err := q.ListQueues(context.Background(), &reevev1.ListQueuesRequest{})
	if err != nil || len(resp.GetQueues()) != 0 {
		t.Errorf("queues %v (%v); want none", resp.GetQueues(), err)
	}
}

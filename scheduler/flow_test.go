package scheduler_test

import (
	"context"

	"fmt"
	"slices"
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
	waitQueue(t, q, typ, fmt.Sprintf("limit %d applied", max), func(qu *reevev1.Queue) bool {
		return qu.GetRunningCounted() && qu.GetConfig().GetMaxRunning() == max
	})
}

// waitQueue waits until ListQueues on q shows typ as ok says.
func waitQueue(t *testing.T, q reevev1.QueueServiceClient, typ, what string, ok func(*reevev1.Queue) bool) {
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
			if qu.GetType() == typ && ok(qu) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not seen after %s: %v", typ, what, wait, resp.GetQueues())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// limitType sets max_running max on typ through q and waits until that
// scheduler applies it.
func limitType(t *testing.T, q reevev1.QueueServiceClient, typ string, max int32) {
	t.Helper()
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: typ, MaxRunning: max})
	waitApplied(t, q, typ, max)
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

// A rate limit holds over any one-second window, within the burst, with
// two schedulers dispatching: each takes its share.
func TestRateLimitAcrossSchedulers(t *testing.T) {
	const (
		rate  = 5
		burst = 2
		tasks = 24
	)
	env, s1, c1 := newEnv(t)
	s2 := env.StartScheduler("")
	q1, q2 := queues(t, s1), queues(t, s2)
	// A max_running that never binds, so that waitApplied sees the settings.
	setLimit(t, q1, &reevev1.SetQueueLimitRequest{Type: "api", MaxRunning: 1000, Rate: rate, Burst: burst})
	waitApplied(t, q1, "api", 1000)
	waitApplied(t, q2, "api", 1000)
	for i, s := range []*testenv.Scheduler{s1, s2} {
		a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID(fmt.Sprintf("a%d", i)), agentsdk.WithMaxConcurrentSteps(16), agentsdk.WithLogger(testenv.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		a.Handle("api", func(context.Context, *agentsdk.Step) (any, error) { return map[string]any{"ok": true}, nil })
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	waitAgents(t, c1, 2)
	var ids []string
	for range tasks {
		ids = append(ids, submit(t, c1, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "api"))}).GetId())
	}
	waitStates(t, c1, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, time.Minute)
	var starts []time.Time
	for _, id := range ids {
		starts = append(starts, stepOf(getTask(t, c1, id), "a").GetStartTime().AsTime())
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	// Started at most the rate over the window plus the burst. A step's
	// start time is stamped by its claim's write, after the limiter
	// granted it: on a loaded machine some writes lag, which can bring
	// stamps closer than their grants. Up to 400 ms of lag is allowed for
	// (rate × 0.4 = 2 more); both schedulers taking the whole rate would
	// still show (about twice the rate).
	const lag = 2 * rate / 5
	if most > rate+burst+lag {
		t.Errorf("%d attempts started within one second; the rate is %d/s with a burst of %d (and %d for the lag of a claim's write)", most, rate, burst, lag)
	}
	t.Logf("at most %d starts in a second; %d over %s", most, len(starts), starts[len(starts)-1].Sub(starts[0]))
}

// A step's concurrency key (a CEL expression over the input) limits its
// running attempts per key value: a customer's second charge waits, in
// order, while other customers' run; the slot its first frees goes to it.
func TestStepConcurrencyKey(t *testing.T) {
	env, s, c := newEnv(t)
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{{
		Name: "charge", Type: "pay", Timeout: durationpb.New(10 * time.Second),
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
	}}}}
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "pay"))
	sub := func(customer string) string {
		return submit(t, c, &reevev1.SubmitTaskRequest{Workflow: wf, Input: testenv.Value(t, map[string]any{"customer": customer})}).GetId()
	}
	c1 := []string{sub("c1"), sub("c1"), sub("c1")}
	c2 := sub("c2")
	got := map[string]*reevev1.StepAssignment{}
	for range 2 {
		as := a.NextAssignment(wait)
		got[as.GetRef().GetTaskId()] = as
	}
	if got[c1[0]] == nil || got[c2] == nil {
		t.Fatalf("assigned %v; want the first task of c1 and c2's", got)
	}
	a.Quiet(300 * time.Millisecond)
	if st := stepOf(getTask(t, c, c1[1]), "charge"); st.GetConcurrencyKey() != "c1" || st.GetWaitReason() != `waiting: concurrency key "c1" of step charge is at its limit 1/1` {
		t.Errorf("queued step: key %q, wait reason %q", st.GetConcurrencyKey(), st.GetWaitReason())
	}
	// c1's next tasks run one at a time, in submission order.
	a.Succeed(got[c1[0]].GetRef(), nil)
	next := a.NextAssignment(wait)
	if next.GetRef().GetTaskId() != c1[1] {
		t.Fatalf("assigned %s; want %s, c1's next", next.GetRef().GetTaskId(), c1[1])
	}
	a.Quiet(200 * time.Millisecond)
	a.Succeed(next.GetRef(), nil)
	last := a.NextAssignment(wait)
	if last.GetRef().GetTaskId() != c1[2] {
		t.Fatalf("assigned %s; want %s", last.GetRef().GetTaskId(), c1[2])
	}
	a.Succeed(last.GetRef(), nil)
	a.Succeed(got[c2].GetRef(), nil)
	waitStates(t, c, append(c1, c2), reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	// The key's slot keys are gone with the attempts.
	resp, err := env.Etcd.Client().Get(context.Background(), "/reeve/keyslots/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("%v key slots left (%v); want none", resp.Count, err)
	}
}

// A key the input cannot give refuses the submission naming input; a key
// expression that does not compile refuses the workflow naming the field,
// line and column.
func TestConcurrencyKeyRefusals(t *testing.T) {
	_, _, c := newEnv(t)
	wf := &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{{
		Name: "charge", Type: "pay", Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1}}}}
	ctx := context.Background()
	_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf},
		Input: testenv.Value(t, map[string]any{"other": 1})})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), `input: workflow.steps[0].concurrency.key "input.customer": `) {
		t.Errorf("submit without the key's field: %v", err)
	}
	wf.Steps[0].Concurrency.Key = "input.customer ==\n  "
	_, err = c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "steps[0].concurrency.key: line 2, column 3: ") {
		t.Errorf("register with a broken key: %v", err)
	}
}

// A workflow's concurrency key limits its live tasks per key value: a
// customer's next task waits, PENDING, until the one before it ends, in
// submission order; a waiting task can be canceled.
func TestWorkflowConcurrencyKey(t *testing.T) {
	env, s, c := newEnv(t)
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: 1},
		Steps:       []*reevev1.StepSpec{step("a", "x"), step("b", "x", "a")}}}
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "x"))
	sub := func(customer string) string {
		return submit(t, c, &reevev1.SubmitTaskRequest{Workflow: wf, Input: testenv.Value(t, map[string]any{"customer": customer})}).GetId()
	}
	c1 := []string{sub("c1"), sub("c1"), sub("c1")}
	c2 := sub("c2")
	got := map[string]*reevev1.StepAssignment{}
	for range 2 {
		as := a.NextAssignment(wait)
		got[as.GetRef().GetTaskId()] = as
	}
	if got[c1[0]] == nil || got[c2] == nil {
		t.Fatalf("assigned %v; want the first task of c1 and c2's", got)
	}
	a.Quiet(300 * time.Millisecond)
	waiting := getTask(t, c, c1[1])
	if waiting.GetState() != reevev1.TaskState_TASK_STATE_PENDING || waiting.GetKeySlot() != 0 ||
		stepOf(waiting, "a").GetWaitReason() != `waiting: concurrency key "c1" of workflow orders is at its limit 1/1` {
		t.Errorf("waiting task: %s, key slot %d, wait reason %q", waiting.GetState(), waiting.GetKeySlot(), stepOf(waiting, "a").GetWaitReason())
	}
	// The task holds its key across its steps.
	a.Succeed(got[c1[0]].GetRef(), nil)
	b := a.NextAssignment(wait)
	if b.GetRef().GetTaskId() != c1[0] || b.GetRef().GetStep() != "b" {
		t.Fatalf("assigned %v; want c1's first task's step b", b.GetRef())
	}
	a.Quiet(200 * time.Millisecond)
	// Canceled while waiting: it ends without running.
	if _, err := c.CancelTask(context.Background(), &reevev1.CancelTaskRequest{TaskId: c1[2], Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	// It ends: the next of its key starts.
	a.Succeed(b.GetRef(), nil)
	next := a.NextAssignment(wait)
	if next.GetRef().GetTaskId() != c1[1] {
		t.Fatalf("assigned %v; want %s", next.GetRef(), c1[1])
	}
	a.Succeed(next.GetRef(), nil)
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	a.Succeed(got[c2].GetRef(), nil)
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	waitStates(t, c, []string{c1[0], c1[1], c2}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	if st := getTask(t, c, c1[2]).GetState(); st != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Errorf("canceled waiting task is %s", st)
	}
	// A rerun computes its keys again from its input and runs under them.
	rr, err := c.RerunTask(context.Background(), &reevev1.RerunTaskRequest{TaskId: c1[0], FromStep: "b", NewTaskId: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.GetTask().GetConcurrencyKey() != "c1" {
		t.Errorf("rerun's key %q; want c1", rr.GetTask().GetConcurrencyKey())
	}
	a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	waitStates(t, c, []string{"again"}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	for _, p := range []string{"/reeve/taskslots/", "/reeve/keywait/"} {
		resp, err := env.Etcd.Client().Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("%s: %v keys left (%v); want none", p, resp.Count, err)
		}
	}
}

// Concurrent submissions of one key never hold more slots than its
// max_running, and every task runs in the end: the ones created waiting are
// admitted as slots free.
func TestWorkflowKeyConcurrentSubmissions(t *testing.T) {
	const (
		limit = 3
		n     = 30
	)
	env, s, c := newEnv(t)
	wf := &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "orders",
		Concurrency: &reevev1.ConcurrencySpec{Key: "input.customer", MaxRunning: limit},
		Steps:       []*reevev1.StepSpec{step("a", "x")}}}
	slots := &slotWatch{held: map[string]bool{}}
	{
		cli := env.Etcd.Client()
		ctx, cancel := context.WithCancel(context.Background())
		wch := cli.Watch(ctx, "/reeve/taskslots/", clientv3.WithPrefix())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for wr := range wch {
				slots.mu.Lock()
				for i, e := range wr.Events {
					if e.Type == mvccpb.DELETE {
						delete(slots.held, string(e.Kv.Key))
					} else {
						slots.held[string(e.Kv.Key)] = true
					}
					if i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != e.Kv.ModRevision {
						slots.max = max(slots.max, len(slots.held))
					}
				}
				slots.mu.Unlock()
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	a := testenv.ConnectRaw(t, s.Addr, register("a", 50, "x"))
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids []string
	)
	for range n {
		wg.Go(func() {
			id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: wf, Input: testenv.Value(t, map[string]any{"customer": "c1"})}).GetId()
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	for range n {
		a.Succeed(a.NextAssignment(wait).GetRef(), nil)
	}
	waitStates(t, c, ids, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	if got := slots.most(); got > limit {
		t.Errorf("%d tasks of one key held slots at once; max_running is %d", got, limit)
	}
}

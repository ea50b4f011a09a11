package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Priority and fairness (issue 36, item 3): tests with real etcd and gRPC.

// A priority out of 1..5 and a fairness key that is too long or has a
// control character (gRPC itself refuses a string that is not UTF-8) are refused INVALID_ARGUMENT naming the field.
// The default priority, given as 3 or not at all, is kept as 0: the same
// request (an idempotent resubmission), the same ready entry as before
// priorities; a task's priority and key reach its ready entry.
func TestSubmitPriorityAndFairnessKey(t *testing.T) {
	env, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, bad := range []struct {
		field string
		req   *reevev1.SubmitTaskRequest
	}{
		{"priority", &reevev1.SubmitTaskRequest{Priority: 6}},
		{"priority", &reevev1.SubmitTaskRequest{Priority: -1}},
		{"fairness_key", &reevev1.SubmitTaskRequest{FairnessKey: strings.Repeat("k", 64)}},
		{"fairness_key", &reevev1.SubmitTaskRequest{FairnessKey: "a\nb"}},
	} {
		bad.req.Workflow = inline(step("x", "t"))
		_, err := c.SubmitTask(ctx, bad.req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), bad.field) {
			t.Errorf("submit %v: %v, want INVALID_ARGUMENT naming %s", bad.req, err, bad.field)
		}
	}

	def := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "def", Priority: 3, Workflow: inline(step("x", "t"))})
	if def.GetPriority() != 0 {
		t.Errorf("priority 3 kept as %d, want 0 (the default)", def.GetPriority())
	}
	again, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "def", Workflow: inline(step("x", "t"))})
	if err != nil || again.GetCreated() {
		t.Fatalf("resubmission without the default priority: %v (created %v), want the same task", err, again.GetCreated())
	}
	hi := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "hi", Priority: 1, FairnessKey: "tenant-é", Workflow: inline(step("x", "t"))})
	if hi.GetPriority() != 1 || hi.GetFairnessKey() != "tenant-é" {
		t.Errorf("task priority %d key %q, want 1 and tenant-é", hi.GetPriority(), hi.GetFairnessKey())
	}
	for id, want := range map[string]*storev1.ReadyEntry{
		"def": {Namespace: "default", TaskId: "def", Step: "x", Type: "t", Attempt: 1},
		"hi":  {Namespace: "default", TaskId: "hi", Step: "x", Type: "t", Attempt: 1, Priority: 1, FairnessKey: "tenant-é"},
	} {
		resp, err := env.Etcd.Client().Get(ctx, "/reeve/ready/default/"+id+"/x")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("ready entry of %s: %v (%d keys)", id, err, len(resp.Kvs))
		}
		// Byte for byte: a task without them has the entry it had before.
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if string(resp.Kvs[0].Value) != string(b) {
			var got storev1.ReadyEntry
			_ = proto.Unmarshal(resp.Kvs[0].Value, &got)
			t.Errorf("ready entry of %s: %v, want %v", id, &got, want)
		}
	}
}

// queuedDepth waits until this scheduler's in-memory queue of type typ
// holds n steps (ListAgents reads its depth), so that what follows sees
// every one of them queued.
func queuedDepth(t *testing.T, c reevev1.SchedulerServiceClient, typ string, n int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var depth int64
		for _, q := range resp.GetQueues() {
			if q.GetStepType() == typ {
				depth = q.GetDepth()
			}
		}
		if depth == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d steps, want %d", typ, depth, n)
		}
		time.Sleep(20 * time.Millisecond) // polling an eventually consistent read, bounded above
	}
}

// runOne takes the agent's next assignment, completes it, and returns its
// task id.
func runOne(t *testing.T, a *testenv.RawAgent) string {
	t.Helper()
	as := a.NextAssignment(wait)
	if ack := a.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result of %v not accepted: %v", as.GetRef(), ack)
	}
	return as.GetRef().GetTaskId()
}

// Ready steps are dispatched by priority, 1 first, FIFO within a priority
// and key (here the shared key): submitted while no agent serves their type, taken one at a
// time by an agent with one slot.
func TestDispatchPriorityOrder(t *testing.T) {
	_, s, c := newEnv(t)
	order := []struct {
		id   string
		prio int32
	}{{"low1", 5}, {"mid1", 0}, {"high1", 1}, {"low2", 5}, {"mid2", 3}, {"high2", 1}, {"two", 2}}
	for _, o := range order {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: o.id, Priority: o.prio, Workflow: inline(step("x", "p"))})
	}
	queuedDepth(t, c, "p", int64(len(order)))
	a := testenv.ConnectRaw(t, s.Addr, register("a", 1, "p"))
	var got []string
	for range order {
		got = append(got, runOne(t, a))
	}
	if want := "[high1 high2 two mid1 mid2 low1 low2]"; fmt.Sprint(got) != want {
		t.Fatalf("dispatch order %v, want %s", got, want)
	}
	// A rerun is dispatched as its old task was.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.RerunTask(ctx, &reevev1.RerunTaskRequest{TaskId: "high1", FromStep: "x", NewTaskId: "high1-again"})
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.GetTask().GetPriority(); p != 1 {
		t.Errorf("rerun of a priority 1 task has priority %d", p)
	}
}

// Fairness under a flood: tenant A has 1,000 steps queued and its agent
// busy; tenant B submits 3 while one of A's runs. Each of B's is
// dispatched within two dispatches of the one before (round-robin of A
// and B). (FIFO within a key: TestDispatchPriorityOrder.)
func TestDispatchFairnessFlood(t *testing.T) {
	_, s, c := newEnv(t)
	const flood = 1000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("a%04d", i), FairnessKey: "A", Workflow: inline(step("x", "f"))})
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	queuedDepth(t, c, "f", flood)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 1, "f"))
	held := a.NextAssignment(wait) // holds the one slot while B submits
	for i := range 3 {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("b%d", i), FairnessKey: "B", Workflow: inline(step("x", "f"))})
	}
	queuedDepth(t, c, "f", flood-1+3)
	if ack := a.Succeed(held.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result not accepted: %v", ack)
	}
	var got []string
	for range 6 {
		got = append(got, runOne(t, a))
	}
	var bs []string
	for i, id := range got {
		if id[0] == 'b' {
			bs = append(bs, id)
		} else if i > 0 && got[i-1][0] == 'a' {
			t.Errorf("dispatches %v: two of A's in a row while B had steps queued", got)
		}
	}
	if fmt.Sprint(bs) != "[b0 b1 b2]" {
		t.Fatalf("dispatches after B submitted: %v, want b0, b1, b2 among the first 6, in order", got)
	}
}

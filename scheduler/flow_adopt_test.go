package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// waitRunning waits until the scheduler behind q counts running attempts
// of typ (the max_running slots held).
func waitRunning(t *testing.T, q reevev1.QueueServiceClient, typ string, running int64) {
	t.Helper()
	waitQueue(t, q, typ, fmt.Sprintf("%d running", running), func(qu *reevev1.Queue) bool { return qu.GetRunning() == running })
}

// bySlot orders assignments by the slot their attempt holds.
func bySlot(t *testing.T, c reevev1.SchedulerServiceClient, as []*reevev1.StepAssignment) []*reevev1.StepAssignment {
	t.Helper()
	slot := map[string]int32{}
	for _, a := range as {
		st := stepOf(getTask(t, c, a.GetRef().GetTaskId()), a.GetRef().GetStep())
		if st.GetSlot() == 0 || st.GetSlotLimit() != 0 {
			t.Fatalf("task %s: slot %d, slot_limit %d; want an adopted slot (slot_limit 0)", a.GetRef().GetTaskId(), st.GetSlot(), st.GetSlotLimit())
		}
		slot[a.GetRef().GetTaskId()] = st.GetSlot()
	}
	out := slices.Clone(as)
	slices.SortFunc(out, func(a, b *reevev1.StepAssignment) int {
		return int(slot[a.GetRef().GetTaskId()] - slot[b.GetRef().GetTaskId()])
	})
	return out
}

// A first max_running on a type whose attempts run counts them: the
// scheduler gives each a slot (above the limit if need be), and no new
// attempt starts until the running ones are under the limit.
func TestFirstLimitCountsRunningAttempts(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	slots := watchSlots(t, env, "erp")
	a := testenv.ConnectRaw(t, s.Addr, register("a", 10, "erp"))
	var running []*reevev1.StepAssignment
	for range 4 {
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))})
		running = append(running, a.NextAssignment(wait))
	}

	limitType(t, q, "erp", 2)
	waitRunning(t, q, "erp", 4)
	queued := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))}).GetId()
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))})
	a.Quiet(300 * time.Millisecond)
	if why := stepOf(getTask(t, c, queued), "a").GetWaitReason(); why != "waiting: erp is at its limit 4/2" {
		t.Errorf("wait reason %q", why)
	}

	// Slots 1..4 were adopted: with the two above the limit freed, two
	// run, holding slots within it: none starts.
	running = bySlot(t, c, running)
	a.Succeed(running[3].GetRef(), nil)
	a.Succeed(running[2].GetRef(), nil)
	a.Quiet(300 * time.Millisecond)
	// One ends: one starts.
	a.Succeed(running[1].GetRef(), nil)
	next := a.NextAssignment(wait)
	a.Quiet(300 * time.Millisecond)
	a.Succeed(running[0].GetRef(), nil)
	last := a.NextAssignment(wait)
	a.Succeed(next.GetRef(), nil)
	a.Succeed(last.GetRef(), nil)
	waitRunning(t, q, "erp", 0)
	if got := slots.most(); got != 4 {
		t.Errorf("etcd held at most %d slots of erp at once; want the 4 adopted", got)
	}
}

// An agent that reconnects, to another scheduler, with attempts claimed
// before its type had a limit has them adopted by that scheduler.
func TestFirstLimitAdoptsAttemptsOfAReconnectingAgent(t *testing.T) {
	env, s1, c := newEnv(t)
	s2 := env.StartScheduler("")
	q2 := queues(t, s2)
	a := testenv.ConnectRaw(t, s1.Addr, register("a", 10, "erp", "other"))
	var refs []*reevev1.StepRef
	for range 3 {
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))})
		refs = append(refs, a.NextAssignment(wait).GetRef())
	}
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "other"))})
	refs = append(refs, a.NextAssignment(wait).GetRef())
	s1.Kill()

	limitType(t, q2, "erp", 1)
	reg := register("a", 10, "erp", "other")
	reg.Running = refs
	b := testenv.ConnectRaw(t, s2.Addr, reg)
	waitRunning(t, q2, "erp", 3)
	c2 := s2.Client(t)
	submit(t, c2, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "erp"))})
	b.Quiet(300 * time.Millisecond)
	for _, ref := range refs {
		b.Succeed(ref, nil)
	}
	b.Succeed(b.NextAssignment(wait).GetRef(), nil)
	waitRunning(t, q2, "erp", 0)
	// The step of the other type took no slot.
	if got := stepOf(getTask(t, c2, refs[3].GetTaskId()), "a").GetSlot(); got != 0 {
		t.Errorf("the step of type other holds slot %d", got)
	}
}

// An attempt holding a max_running slot has its complete-by in the slot
// key, not a deadline key (the limit costs no key of its own), and the
// supervisor recovers it there: woken by the slot's deadline, not its
// tick. An adopted attempt keeps its deadline key.
func TestSlotHoldsTheAttemptsDeadline(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp"))
	long := step("a", "erp")
	long.Timeout = durationpb.New(time.Hour)
	adopted := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(long)}).GetId()
	first := a.NextAssignment(wait)
	limitType(t, q, "erp", 2)
	waitRunning(t, q, "erp", 1)
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Hour))

	sp := step("a", "erp")
	sp.Timeout = durationpb.New(5 * time.Second) // the keys are read before it expires
	sp.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
	id := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)}).GetId()
	as := a.NextAssignment(wait)
	if as.GetRef().GetTaskId() != id {
		t.Fatalf("assigned %s, want %s", as.GetRef().GetTaskId(), id)
	}
	keys := func(prefix string) map[string]string {
		t.Helper()
		resp, err := env.Etcd.Client().Get(context.Background(), prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
		return out
	}
	deadlineOf := func(task string) (n int) {
		for k := range keys("/reeve/deadlines/") {
			if strings.Contains(k, "/"+task+"/") {
				n++
			}
		}
		return n
	}
	if n := deadlineOf(id); n != 0 {
		t.Errorf("%d deadline keys for the attempt holding a slot; want none", n)
	}
	if n := deadlineOf(adopted); n != 1 {
		t.Errorf("%d deadline keys for the adopted attempt; want 1", n)
	}
	by := as.GetCompleteBy().AsTime().UnixNano()
	slots := keys("/reeve/slots/default/erp/")
	if got, want := slots["/reeve/slots/default/erp/000002"], fmt.Sprintf("%s/a/1 %d", id, by); got != want {
		t.Errorf("slot 2 holds %q, want %q (all: %v)", got, want, slots)
	}
	if got, want := slots["/reeve/slots/default/erp/000001"], adopted+"/a/1"; got != want {
		t.Errorf("slot 1 holds %q, want the adopted attempt %q", got, want)
	}

	// Never answered: the supervisor, whose tick is an hour, retries it at
	// its complete-by.
	retry := a.NextAssignment(wait)
	if retry.GetRef().GetTaskId() != id || retry.GetRef().GetAttempt() != 2 {
		t.Fatalf("assigned %v, want attempt 2 of %s", retry.GetRef(), id)
	}
	a.Succeed(retry.GetRef(), nil)
	a.Succeed(first.GetRef(), nil)
	waitStates(t, c, []string{id, adopted}, reevev1.TaskState_TASK_STATE_SUCCEEDED, wait)
	waitRunning(t, q, "erp", 0)
	verifyClean(t, env)
}

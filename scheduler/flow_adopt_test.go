package scheduler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// waitRunning waits until the scheduler behind q counts running attempts
// of typ (the max_running slots held).
func waitRunning(t *testing.T, q reevev1.QueueServiceClient, typ string, running int64) {
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
			if qu.GetType() == typ && qu.GetRunning() == running {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d running %s not counted after %s: %v", running, typ, wait, resp.GetQueues())
		}
		time.Sleep(10 * time.Millisecond)
	}
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

	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 2})
	waitApplied(t, q, "erp", 2)
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

	setLimit(t, q2, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 1})
	waitApplied(t, q2, "erp", 1)
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

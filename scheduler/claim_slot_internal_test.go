package scheduler

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A claim inside a write reserves what the claim takes for one step type
// (a max_running slot of it, a rate token of it): when the store runs the
// write's transition again on a fresh record (a conflict) and the step it
// would claim now is of another type, it claims nothing. Before, it
// claimed that step with the first type's slot: the slot key went to the
// other type, and the first type's reservation waited for a slot key that
// never came, holding one of its slots in this scheduler's view for good.
func TestWriteClaimRerunOfAnotherTypeClaimsNothing(t *testing.T) {
	clock := clockwork.NewFakeClock()
	d := newDispatcher(dispatchDeps{id: "s", clock: clock, claimConcurrency: 1, work: newWorkGroup()})
	for i := range d.flow.synced {
		d.flow.synced[i] = true
	}
	limited, other := queueKey{"ns", "erp"}, queueKey{"ns", "other"}
	d.flow.configs[limited] = &reevev1.QueueConfig{MaxRunning: 1}
	conn := newAgentConn("session", &reevev1.Register{AgentId: "a", Namespace: "ns", StepTypes: []string{"erp", "other"}, MaxConcurrentSteps: 4}, 1<<20)
	d.agents.add(conn)

	task := func(types ...string) *reevev1.Task {
		wf := &reevev1.Workflow{Name: "w"}
		for i, typ := range types {
			wf.Steps = append(wf.Steps, &reevev1.StepSpec{Name: string(rune('a' + i)), Type: typ})
		}
		return taskstate.NewAt("ns", "t", wf, nil, clock.Now(), time.Time{}, 0)
	}
	c := &writeClaim{d: d}
	// The first run claims the erp step, with slot 1 of erp.
	first := task("erp", "other")
	if err := c.run(first, "", clock.Now(), nil); err != nil || !c.claimed {
		t.Fatalf("first run: claimed %v, err %v", c.claimed, err)
	}
	if st := taskstate.FindStep(first, "a"); st.GetSlot() != 1 || st.GetSlotLimit() != 1 {
		t.Fatalf("erp step slot %d/%d; want 1/1", st.GetSlot(), st.GetSlotLimit())
	}
	// Run again on a record whose first queued step is of the other type.
	again := task("other", "erp")
	if err := c.run(again, "", clock.Now(), nil); err != nil {
		t.Fatal(err)
	}
	if c.claimed {
		st := taskstate.FindStep(again, "a")
		t.Fatalf("the rerun claimed a step of %s with the slot %d/%d reserved for %s", taskstate.ExecutionType(again, st), st.GetSlot(), st.GetSlotLimit(), limited.typ)
	}
	if st := taskstate.FindStep(again, "a"); store.HoldsSlot(st) {
		t.Fatalf("step of %s holds slot %d", other.typ, st.GetSlot())
	}
	// Settled unclaimed, the reservation is given back: erp has its slot.
	c.settle(nil, true, "test")
	d.lock()
	n, _ := d.flow.taken(limited, 1)
	d.unlock()
	if n != 0 {
		t.Fatalf("%d slots of erp taken after the write; want 0", n)
	}
}

// A type's first max_running, delivered by the watch, holds back its
// claims for adoptGrace (every scheduler adopts the attempts its agents
// run meanwhile); one read in the listing at start does not.
func TestFirstLimitHoldsClaimsWhileSchedulersAdopt(t *testing.T) {
	clock := clockwork.NewFakeClock()
	d := newDispatcher(dispatchDeps{id: "s", clock: clock, claimConcurrency: 1, work: newWorkGroup()})
	k := queueKey{"ns", "erp"}
	limit := func(n int32) store.FlowEvent {
		return store.FlowEvent{Kind: store.FlowQueue, Namespace: "ns", Type: "erp", Config: &reevev1.QueueConfig{MaxRunning: n}}
	}
	// Listed at start: no grace.
	d.applyFlow(limit(2))
	for kind := range d.flow.synced {
		d.applyFlow(store.FlowEvent{Kind: store.FlowKind(kind), Synced: true})
	}
	if _, ok := d.flow.take(k, clock.Now()); !ok {
		t.Fatal("a limit listed at start holds claims back")
	}
	d.flow.claimed(k, flowSlot{slot: 1}, false, clock.Now())

	// Cleared, then set again through the watch: a first limit.
	d.applyFlow(store.FlowEvent{Kind: store.FlowQueue, Namespace: "ns", Type: "erp", Deleted: true})
	d.applyFlow(limit(2))
	if _, ok := d.flow.take(k, clock.Now()); ok {
		t.Fatal("claimed at once after a first limit")
	}
	if at, ok := d.nextDue(); !ok || !at.Equal(clock.Now().Add(adoptGrace)) {
		t.Fatalf("dispatcher wakes at %v (%v); want the grace's end", at, ok)
	}
	clock.Advance(adoptGrace)
	if fs, ok := d.flow.take(k, clock.Now()); !ok || fs.slot != 1 {
		t.Fatalf("after the grace: %+v, %v; want slot 1", fs, ok)
	}
	// A changed limit is no first limit.
	d.applyFlow(limit(3))
	if _, ok := d.flow.take(k, clock.Now()); !ok {
		t.Fatal("a changed limit holds claims back")
	}
}

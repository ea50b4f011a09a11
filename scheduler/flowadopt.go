package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Adopting running attempts into max_running slots (docs/architecture.md,
// "A first limit while attempts run"). An attempt claimed while its type
// had no max_running holds no slot; once the type gets one, the scheduler
// whose agent runs the attempt gives it a slot, so that the limit counts
// it: the first slot number no attempt holds and no claim here has chosen,
// above the limit if need be (slots above the limit stop every claim of
// the type until they are freed, as after a lowered limit). The write
// records the slot in the step with slot_limit 0, which the store reads as
// "adopted": it compares the slot key absent and nothing else
// (store.slotCmps), since slots above the limit are what adoption takes.
//
// Three moments find such attempts, each on the scheduler whose agent runs
// them: the type's max_running set where it had none (every attempt of
// the type this scheduler's agents run), an assignment handed over whose
// claim was decided before the limit was seen, and an agent registering
// with attempts it ran on an earlier stream.

// errNotAdoptable: the attempt ended or moved on, holds a slot already,
// was deferred, or is of another type.
var errNotAdoptable = errors.New("attempt not adoptable")

// adoptTimeout bounds one adoption write, etcd outages included.
const adoptTimeout = 10 * time.Second

// adoptGrace is how long after the watch delivers a type's first
// max_running a scheduler starts nothing of the type: the time for every
// scheduler to adopt the attempts its agents run (one write each,
// concurrently) and for the slot keys to reach every watch. A scheduler
// that sees free slots sooner could start an attempt beside running ones
// not yet adopted elsewhere; after it, one can only if some scheduler's
// adoptions took longer (etcd slower than this).
const adoptGrace = time.Second

// settle holds back claims of k until until.
func (f *flowControl) settle(k queueKey, until time.Time) {
	if f.settling == nil {
		f.settling = map[queueKey]time.Time{}
	}
	f.settling[k] = until
}

// adoptTries bounds the slots one attempt tries when other schedulers'
// claims or adoptions take them first.
const adoptTries = 5

// adoptionsInFlight bounds the adoption writes of one call at once.
const adoptionsInFlight = 32

// adoptSlot records slot as the max_running slot of ref, dispatched and
// of type typ, when it holds none.
func (e *engine) adoptSlot(ref *reevev1.StepRef, typ string, slot int32) error {
	until := time.Now().Add(adoptTimeout)
	ctx, cancel := context.WithDeadline(e.base, until)
	defer cancel()
	_, err := e.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(), until: until,
		change: func(t *reevev1.Task, _ time.Time, _ *writeClaim) (effects, error) {
			st := taskstate.FindStep(t, ref.GetStep())
			if st == nil || st.GetAttempt() != ref.GetAttempt() || !taskstate.Dispatched(st) || st.GetDeferred() ||
				st.GetSlot() > 0 || taskstate.ExecutionType(t, st) != typ {
				return effects{}, errNotAdoptable
			}
			st.Slot, st.SlotLimit = slot, 0
			return effects{}, nil
		}})
	return err
}

// adoptAgentsOf adopts the attempts this scheduler's agents run that may
// be of type k (those of every agent registered for it). d.mu is held.
func (d *dispatcher) adoptAgentsOf(k queueKey) {
	var refs []*reevev1.StepRef
	for _, c := range d.agents.all() {
		if c.ns == k.ns && slices.Contains(c.types, k.typ) {
			refs = append(refs, runningRefs(c)...)
		}
	}
	d.adoptLocked(k, refs)
}

// adoptConn adopts, for each limited type c is registered for, the
// attempts c runs (from an earlier stream, listed by its Register). d.mu
// is held.
func (d *dispatcher) adoptConn(c *agentConn) {
	if len(c.running) == 0 {
		return
	}
	refs := runningRefs(c)
	for _, typ := range c.types {
		d.adoptLocked(queueKey{c.ns, typ}, refs)
	}
}

// adoptUnslotted adopts an attempt just handed over whose claim took no
// slot although its type has a max_running now. d.mu is held.
func (d *dispatcher) adoptUnslotted(a *reevev1.StepAssignment, slot int32) {
	if slot == 0 {
		d.adoptLocked(queueKey{a.GetRef().GetNamespace(), a.GetType()}, []*reevev1.StepRef{a.GetRef()})
	}
}

func runningRefs(c *agentConn) []*reevev1.StepRef {
	refs := make([]*reevev1.StepRef, 0, len(c.running))
	for k := range c.running {
		if ref, ok := parseRefKey(k); ok {
			refs = append(refs, ref)
		}
	}
	return refs
}

// adoptLocked reserves a slot of k for each of refs, when k has a
// max_running, and writes the adoptions in the background. The
// reservations count as taken until each write ends, so that no claim
// here starts an attempt of k meanwhile on the strength of slots the
// running ones are about to hold. d.mu is held.
func (d *dispatcher) adoptLocked(k queueKey, refs []*reevev1.StepRef) {
	if d.flow.configs[k].GetMaxRunning() <= 0 || len(refs) == 0 || d.adoptSlot == nil {
		return
	}
	slots := make([]int32, len(refs))
	for i := range refs {
		slots[i] = d.flow.reserveAny(k)
	}
	ok := d.work.goOptional(func() {
		sem := make(chan struct{}, adoptionsInFlight)
		for i, ref := range refs {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				d.adoptOne(k, ref, slots[i])
			}()
		}
		for range adoptionsInFlight {
			sem <- struct{}{}
		}
	})
	if !ok { // stopping: the reservations go
		for _, s := range slots {
			d.flow.claimed(k, flowSlot{slot: s}, false, d.clock.Now())
		}
	}
}

// adoptOne writes one adoption into slot, and into other free slots while
// other schedulers take them first.
func (d *dispatcher) adoptOne(k queueKey, ref *reevev1.StepRef, slot int32) {
	for try := 1; ; try++ {
		err := d.adoptSlot(ref, k.typ, slot)
		d.lock()
		d.flow.claimed(k, flowSlot{slot: slot}, err == nil, d.clock.Now())
		if errors.Is(err, store.ErrSlotTaken) && try < adoptTries && d.flow.configs[k].GetMaxRunning() > 0 {
			slot = d.flow.reserveAny(k)
			d.unlock()
			continue
		}
		d.unlock()
		d.poke()
		switch {
		case err == nil:
			d.log.Info("running attempt adopted into a max_running slot", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "type", k.typ, "slot", slot)
		case errors.Is(err, errNotAdoptable), errors.Is(err, taskstate.ErrStale), errors.Is(err, taskstate.ErrTerminal), errors.Is(err, store.ErrNotFound):
		default:
			d.log.Warn("adopt running attempt into a max_running slot: it is not counted against the limit until it ends",
				"task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "type", k.typ, "err", err)
		}
		return
	}
}

// reserveAny reserves for an adoption the lowest slot of k that no
// attempt holds and no claim here has chosen, whatever k's limit.
func (f *flowControl) reserveAny(k queueKey) int32 {
	s := int32(1)
	for f.held[k][s] || f.reserved[k][s] != nil {
		s++
	}
	if f.reserved[k] == nil {
		f.reserved[k] = map[int32]*slotReservation{}
	}
	f.reserved[k][s] = &slotReservation{inflight: true}
	return s
}

// recordSlot notes in the dispatched event of st's attempt the
// max_running slot its claim took (HistoryEvent.slot).
func recordSlot(t *reevev1.Task, st *reevev1.Step) {
	if st.GetSlot() == 0 {
		return
	}
	h := t.GetHistory()
	for i := len(h) - 1; i >= 0; i-- {
		if e := h[i]; e.GetStep() == st.GetName() && e.GetAttempt() == st.GetAttempt() &&
			(e.GetKind() == "step.dispatched" || e.GetKind() == "compensation.dispatched") {
			e.Slot = st.GetSlot()
			return
		}
	}
}

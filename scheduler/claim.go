package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Claims: the task writes that hand a step to an agent, and take it back.
// The dispatcher (dispatch.go) starts a claim of a ready entry, a take-back
// and a heartbeat's expiry; a create, a result or a recovery claims the step
// it makes ready inside its own write (writeClaim, below).

// claimTimeout bounds one claim transaction.
const claimTimeout = 10 * time.Second

// claim dispatches the ready execution entry to agentID: one task write
// that marks it running (with complete-by and locked-by) and takes it off
// the ready queue. It returns the assignment to send. It runs on the
// server's lifetime context, not the dispatcher's: a shutdown that stops
// dispatching must not cut off a claim whose write may already be
// committing.
func (e *engine) claim(entry *storev1.ReadyEntry, agentID string, slot flowSlot) (*reevev1.StepAssignment, error) {
	ctx, cancel := context.WithTimeout(e.base, claimTimeout)
	defer cancel()
	w, err := e.update(ctx, taskWrite{ns: entry.GetNamespace(), id: entry.GetTaskId(),
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			if err := taskstate.Claim(t, entry.GetStep(), entry.GetAttempt(), e.id, agentID, now); err != nil {
				return effects{}, err
			}
			takeSlot(t, entry, slot)
			return effects{assignTo: agentID, assignStep: entry.GetStep()}, nil
		}})
	if err != nil {
		return nil, err
	}
	return w.assignment, nil
}

// assignment builds what an agent needs to run the step's current execution.
func assignment(t *reevev1.Task, st *reevev1.Step) *reevev1.StepAssignment {
	spec := taskstate.Spec(t, st.GetName())
	a := &reevev1.StepAssignment{
		Ref:                     taskstate.Ref(t, st),
		Type:                    taskstate.ExecutionType(t, st),
		IdempotencyKey:          st.GetIdempotencyKey(),
		Input:                   t.GetInput(),
		Config:                  spec.GetConfig(),
		CompleteBy:              st.GetCompleteBy(),
		HeartbeatTimeout:        spec.GetHeartbeatTimeout(),
		ReassignAfterDisconnect: spec.GetReassignAfterDisconnect(),
		DependencyOutputs:       map[string]*structpb.Value{},
		HeartbeatDetails:        st.GetHeartbeatDetails(),
	}
	if taskstate.Compensating(st) {
		// The compensation gets the output of the step it undoes.
		a.Compensation = true
		a.IdempotencyKey = fmt.Sprintf("%s:compensate", st.GetIdempotencyKey())
		a.Config = spec.GetCompensation().GetConfig()
		a.DependencyOutputs[st.GetName()] = st.GetOutput()
		return a
	}
	for _, dep := range spec.GetDependsOn() {
		a.DependencyOutputs[dep] = taskstate.FindStep(t, dep).GetOutput()
	}
	return a
}

// claimed records a claim of st for agentID, committed in rec just now: its
// span and metrics, and its wait for shedding.
func (e *engine) claimed(rec *storev1.TaskRecord, st *reevev1.Step, a *reevev1.StepAssignment, agentID string) {
	now := e.clock.Now()
	a.CompletionToken = e.tokens.forStep(rec.GetTask(), st) // completion.go
	e.tel.claimed(rec, st, a, e.id, agentID, now)
	t := rec.GetTask()
	e.shed.dispatched(t.GetNamespace(), taskstate.ExecutionType(t, st), dueAt(st, now), now)
}

// dueAt is when st's current attempt became due: its ready time, or the end
// of its backoff when later; now when the record has no ready time or it
// lies ahead (another scheduler's clock).
func dueAt(st *reevev1.Step, now time.Time) time.Time {
	due := st.GetReadyTime().AsTime()
	if nb := st.GetNotBefore(); nb != nil && nb.AsTime().After(due) {
		due = nb.AsTime()
	}
	if st.GetReadyTime() == nil || due.After(now) {
		due = now
	}
	return due
}

// expireNow moves the complete-by of an attempt whose agent missed its
// heartbeat to now: the supervisor then recovers it like any expired attempt.
func (e *engine) expireNow(ref *reevev1.StepRef, details *structpb.Value) {
	ctx, cancel := context.WithTimeout(e.base, 10*time.Second)
	defer cancel()
	_, err := e.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(),
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			if err := taskstate.ExpireNow(t, ref.GetStep(), ref.GetAttempt(), "scheduler/"+e.id, now); err != nil {
				return effects{}, err
			}
			keepDetails(t, ref, details)
			return effects{}, nil
		}})
	if err != nil && !errors.Is(err, taskstate.ErrStale) {
		e.log.Warn("expire attempt after missed heartbeat", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "err", err)
	}
}

// takeBack queues again an attempt dispatched to agentID that the agent
// never got or never acknowledged (taskstate.Unacknowledged): it never
// started, so the next attempt is ready at once and no failure is counted.
// Nothing changes when the attempt is not (or no longer) the step's current
// one held by agentID, e.g. when the claim that would have dispatched it
// never committed. Retried while etcd is unavailable, for a bounded time;
// the attempt's complete-by covers a take-back that never lands.
func (e *engine) takeBack(ref *reevev1.StepRef, agentID, reason string) {
	until := time.Now().Add(claimTimeout)
	ctx, cancel := context.WithDeadline(e.base, until)
	defer cancel()
	_, err := e.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(), until: until,
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			return effects{}, taskstate.Unacknowledged(t, ref.GetStep(), ref.GetAttempt(), agentID, reason, "scheduler/"+e.id, now)
		}})
	if err != nil && !errors.Is(err, taskstate.ErrStale) && !errors.Is(err, taskstate.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		e.log.Warn("take back undelivered attempt", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "err", err)
	}
}

// Claim inside another write. Three writes make a step queued and due: a
// new task's create (its first step), a result (the next step) and a
// recovery's RETRY due at once (the next attempt). Each would otherwise cost
// a second task write before an agent has the step: the first (a ready key
// written, the watch tells every scheduler) and the claim (the ready key
// deleted). When an agent of this scheduler has room for the step's type and
// nothing of that type waits in this scheduler's ready queue at the step's
// priority or a higher one (claimed steps do not overtake queued ones that
// would be dispatched before them; fairqueue.go), the write claims the step
// for that agent too: one write, no ready key, the same record and history
// as the two writes would leave (step.dispatched after the write's own
// events). The
// write keeps its own compares (a creation's, a result's, a supervisor's
// fence), so everything that holds for it holds for the claim.
//
// One writeClaim serves one write, in three parts: run (inside the write's
// change, as often as the store runs it), then, applied by the engine
// (engine.go), settle (once the write returned) and deliverClaim (once the
// write's other effects, such as revocations, are done). A nil writeClaim
// (a write that may not claim) claims nothing.

// directSlot is capacity reserved on an agent for one claim inside a write.
type directSlot struct {
	conn    *agentConn
	release func() // ends the slot's hold on the scheduler's shutdown (workGroup.hold)
	k       queueKey
	fs      flowSlot // the max_running slot and rate token the claim takes (limits.go)
}

// writeClaim claims, inside a write's transition, a step the transition
// made queued and due, for an agent here with room. slot keeps the
// reservation across re-runs of the transition (a lost race runs it again
// on the fresh record); claimed reports whether the last run claimed.
//
// The store may run the transition again after UpdateTask returned (its
// caller's context ended while the write was queued or committing): once
// settle is called, a run neither reserves nor claims, nor changes claimed,
// ref or slot, which settle and deliverClaim then read. Guarded by mu.
type writeClaim struct {
	d        *dispatcher
	mu       sync.Mutex
	finished bool
	slot     *directSlot
	claimed  bool
	ref      *reevev1.StepRef // the claimed attempt
	// slotLost: the write's max_running slot was taken by another claim
	// (store.ErrSlotTaken); its next runs claim nothing (slotTaken).
	slotLost bool
}

// run applies transition to t (nil: none) and, when it succeeds, claims
// step (empty: the task's first queued step) if it is queued and due and an
// agent here has room for it. Only transition's error is returned: a step
// that cannot be claimed here waits in the ready queue.
func (c *writeClaim) run(t *reevev1.Task, step string, now time.Time, transition func() error) error {
	if c == nil {
		return c.without(transition)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		// A run after settle (the caller gave up) claims nothing and leaves
		// what settle read as it was.
		if transition == nil {
			return nil
		}
		return transition()
	}
	c.claimed = false
	if transition != nil {
		if err := transition(); err != nil {
			return err
		}
	}
	var st *reevev1.Step
	if step != "" {
		st = taskstate.FindStep(t, step)
	} else {
		for _, cand := range t.GetSteps() {
			if taskstate.Dispatchable(t, cand) {
				st = cand
				break
			}
		}
	}
	if st == nil || !taskstate.Dispatchable(t, st) || (st.GetNotBefore() != nil && now.Before(st.GetNotBefore().AsTime())) || keyed(t, st) {
		return nil
	}
	k := queueKey{t.GetNamespace(), taskstate.ExecutionType(t, st)}
	if c.slot == nil {
		c.slot = c.d.reserveDirect(k, t.GetPriority())
	}
	// The reservation is for one type: its agent has room for it, and its
	// max_running slot and rate token are that type's. A run on a fresh
	// record whose step is of another type claims nothing.
	if c.slot == nil || c.slot.k != k || (c.slotLost && c.slot.fs.slot > 0) {
		return nil
	}
	// Claim refuses before it changes anything: on a refusal the record is
	// the transition alone, and the step waits in the ready queue.
	if err := taskstate.Claim(t, st.GetName(), st.GetAttempt(), c.d.id, c.slot.conn.agentID, now); err != nil {
		return nil
	}
	st.Slot, st.SlotLimit, st.SlotDeadline = c.slot.fs.slot, c.slot.fs.limit, c.slot.fs.slot > 0
	recordSlot(t, st)
	c.claimed, c.ref = true, taskstate.Ref(t, st)
	return nil
}

// slotTaken is called by the store when the write's max_running slot was
// taken by another claim (its compare failed, nothing written): the write
// runs again and claims nothing, and the step waits in the ready queue.
func (c *writeClaim) slotTaken() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.slotLost = true
	c.mu.Unlock()
}

// without applies transition to t and claims nothing: a run of the write
// that takes another course (a recovery that does not retry).
func (c *writeClaim) without(transition func() error) error {
	if c == nil {
		if transition == nil {
			return nil
		}
		return transition()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.finished { // after settle, what it read stays as it was
		c.claimed = false
	}
	return transition()
}

// settle ends the write's claim once the write returned, with err its
// error and committed whether it wrote the record (a create finds the id
// taken without error). A claim whose write's outcome is unknown (it may
// have committed after the call gave up) is taken back, as for any claim
// (dispatcher.claim); an unused reservation is given back. It returns the
// claim to hand to deliverClaim, or nil when there is none. what names the
// write in the take-back's reason.
func (c *writeClaim) settle(err error, committed bool, what string) *writeClaim {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	if c.claimed && err != nil && !notWritten(err) {
		c.d.logs.log(c.d.log, slog.LevelWarn, what+": "+errKind(err), what+": outcome unknown, taking the attempt back",
			"task_id", c.ref.GetTaskId(), "step", c.ref.GetStep(), "attempt", c.ref.GetAttempt(), "err", err)
		c.d.takeBack(c.ref, c.slot.conn.agentID, what+", outcome unknown: "+err.Error())
	}
	if !c.claimed || err != nil || !committed {
		c.d.unreserve(c.slot)
		return nil
	}
	return c
}

// deliverClaim hands the step c claimed in the written record rec to its
// agent (nil c: nothing was claimed); the slot's reservation ends.
func (e *engine) deliverClaim(rec *storev1.TaskRecord, c *writeClaim) {
	if c == nil {
		return
	}
	t := rec.GetTask()
	st := taskstate.FindStep(t, c.ref.GetStep())
	a := assignment(t, st)
	// claimed puts the attempt's trace context in the assignment: before it
	// goes to the stream, whose send loop encodes it.
	e.claimed(rec, st, a, c.slot.conn.agentID)
	e.disp.deliver(c.slot, a)
}

// notWritten reports whether a write failed in a way that certainly wrote
// nothing: refused before it reached etcd (overloaded, too many operations,
// too large), by etcd as a whole (out of space) or by its workflow compare
// (a newer version exists), or left a newer Reeve's record alone (an
// unknown record version). Only other failures (unavailable, timed out)
// leave the outcome unknown.
func notWritten(err error) bool {
	return errors.Is(err, store.ErrOverloaded) || errors.Is(err, store.ErrTooManyOps) ||
		errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrNoSpace) || errors.Is(err, store.ErrStaleWorkflow) ||
		errors.Is(err, store.ErrUnknownVersion) || errors.Is(err, store.ErrSlotTaken)
}

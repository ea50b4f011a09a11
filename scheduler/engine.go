package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// The engine writes tasks. Every change the scheduler makes to a task
// record (a create, a claim, a result, a recovery, a cancel, a take-back,
// a heartbeat's expiry, an adoption) is one call of engine.update, or
// engine.create for a new task: one etcd transaction over the task's fresh
// record, whose change function returns what the write did (its effects).
// Once the write committed, the engine applies the effects itself, always
// in this order:
//
//  1. a claim made inside the write is settled: taken back when the
//     write's outcome is unknown (claim.go);
//  2. the write is counted: a task it ended, a result's run time and span,
//     a claim's span and its wait (telemetry.go, overload.go);
//  3. the agents holding executions the write ended are told to stop;
//  4. a step claimed inside the write is handed to its agent.
//
// No handler does work after a write by hand: a new kind of write gets all
// four by saying, in its effects, what it did.
type engine struct {
	id    string // this scheduler's id: the actor of its own writes
	clock clockwork.Clock
	log   *slog.Logger
	logs  *logLimiter
	store *store.Store
	tasks *taskread.Reader // etcd, then the archive
	tel   *instruments
	shed  *overload // nil when shedding is off
	disp  *dispatcher
	// base outlives client and agent streams: a result that arrived is
	// recorded even when its stream breaks (Server.base).
	base context.Context

	// dispatchOnSubmit: a create claims its first step for an agent here
	// with room (WithDispatchOnSubmit).
	dispatchOnSubmit bool
	// created counts a task created in a namespace against its cap on
	// active tasks (admission.created).
	created func(ns string)

	// tokens derives and verifies completion tokens (completion.go).
	tokens *completionTokens
	// scheduledStart records how late a schedule's task fired ahead
	// started (schedule_telemetry.go); nil: not recorded.
	scheduledStart func(ctx context.Context, ns string, late time.Duration)
}

// effects is what a task write did, as its change function reports it on
// the fresh record; the engine acts on it once the write committed.
type effects struct {
	// revoke, when set, is the reason told to the agents holding the
	// executions the write ended (taskstate.Revoked).
	revoke string
	// result is the agent's result the write recorded, from resultAgent:
	// its execution is not revoked, its run time and span are recorded.
	result      *reevev1.StepResult
	resultAgent string
	// assignTo is the agent the write claimed assignStep for (the
	// dispatcher's claim of a ready entry): the engine builds the
	// assignment (written.assignment) and counts the claim.
	assignTo, assignStep string
	// action names what a recovery did, for its span and log.
	action string
	// completed is the step a completion from outside completed (by its
	// token when byToken): its wait's span and count (completion.go).
	completed string
	byToken   bool
}

// change applies a write to the fresh record t at now and reports what it
// did. It may run more than once (a lost race runs it again on the newer
// record). claim is the write's claim, nil when the write may not claim: a
// change that makes a step queued and due may claim it for an agent here
// with claim.run (claim.go).
type change func(t *reevev1.Task, now time.Time, claim *writeClaim) (effects, error)

// taskWrite is one write of a task.
type taskWrite struct {
	ns, id string
	fences []clientv3.Cmp // compares the transaction must also pass (a supervisor's fence)
	// claim, when set, lets the write claim a step it makes due for an
	// agent here; it names the write in the log of a claim taken back.
	claim string
	// until, when set, is how long the write is retried while etcd is
	// unavailable (without the claim): a result that arrived in time is not
	// lost to a short etcd outage.
	until  time.Time
	change change
}

// written is a committed task write: the record before and after it, and
// what it did.
type written struct {
	before, after *storev1.TaskRecord
	effects
	// assignment is the step the write claimed for effects.assignTo.
	assignment *reevev1.StepAssignment
}

// update writes w and applies its effects. On an error no effect is
// applied; written has the records the store returned (before: the record
// a change refused) and what the change's last run reported.
func (e *engine) update(ctx context.Context, w taskWrite) (written, error) {
	var claim *writeClaim
	if w.claim != "" {
		claim = &writeClaim{d: e.disp}
	}
	// The store may run a change again after UpdateTask returned (its
	// context ended while the write was queued): only the runs of the call
	// in progress report their effects.
	var (
		mu   sync.Mutex
		call int
		last effects
	)
	runAs := func(n int, c *writeClaim) func(t *reevev1.Task) error {
		return func(t *reevev1.Task) error {
			eff, err := w.change(t, e.clock.Now(), c)
			mu.Lock()
			if call == n {
				last = eff
			}
			mu.Unlock()
			return err
		}
	}
	mu.Lock()
	call = 1
	mu.Unlock()
	var (
		before, after *storev1.TaskRecord
		err           error
	)
	if claim != nil {
		before, after, err = e.store.UpdateTaskClaiming(ctx, w.ns, w.id, runAs(1, claim), claim.slotTaken, w.fences...)
	} else {
		before, after, err = e.store.UpdateTask(ctx, w.ns, w.id, runAs(1, claim), w.fences...)
	}
	next := claim.settle(err, err == nil, w.claim)
	if err != nil && !w.until.IsZero() && transient(err) && e.store.Client().Ctx().Err() == nil {
		mu.Lock()
		call = 2
		mu.Unlock()
		before, after, err = e.updateUntil(w, runAs(2, nil))
	}
	mu.Lock()
	eff := last
	call = 0
	mu.Unlock()
	wr := written{before: before, after: after, effects: eff}
	if err != nil {
		return wr, err // the effects are the change's report; none is applied
	}
	e.apply(&wr, next)
	return wr, nil
}

// transient reports whether a write may succeed when tried again as it is.
func transient(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrConflict)
}

// updateUntil retries a write while etcd is unavailable, until w.until.
func (e *engine) updateUntil(w taskWrite, fn func(*reevev1.Task) error) (before, after *storev1.TaskRecord, err error) {
	ctx, cancel := context.WithDeadline(e.base, w.until)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		b, a, err := e.store.UpdateTask(ctx, w.ns, w.id, fn, w.fences...)
		if err == nil || !transient(err) {
			return b, a, err
		}
		if e.store.Client().Ctx().Err() != nil {
			return nil, nil, err // the etcd client was closed: this process is going away
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// apply applies the effects of the committed write w, with claim the
// write's settled claim (nil: none), in the order the type's comment gives.
func (e *engine) apply(w *written, claim *writeClaim) {
	bt, at := w.before.GetTask(), w.after.GetTask()
	now := e.clock.Now()
	if w.result != nil {
		e.tel.resulted(w.before, w.after, w.result.GetRef(), w.result, w.resultAgent, now)
	} else if w.completed != "" {
		e.tel.completedOutside(w.before, w.after, w.completed, w.byToken, now)
	} else {
		e.tel.ended1(bt, at)
	}
	e.tel.waitsStarted(bt, at)
	if w.assignTo != "" {
		st := taskstate.FindStep(at, w.assignStep)
		w.assignment = assignment(at, st)
		e.claimed(w.after, st, w.assignment, w.assignTo)
	}
	if w.revoke != "" {
		e.disp.revoke(taskstate.Revoked(bt, at, w.result.GetRef()), w.revoke)
	}
	e.deliverClaim(w.after, claim)
}

// create writes the new task rec (store.CreateTask; CreateTaskOfLatest when
// ofLatest: its workflow is the cached latest version, checked in the
// transaction) and applies the effects of a create: the task counted
// against its namespace's cap, and its first step, claimed in the write for
// an idle agent here (WithDispatchOnSubmit), handed to it. existing is the
// task that holds the id when it was taken (created false).
func (e *engine) create(ctx context.Context, rec *storev1.TaskRecord, ofLatest bool) (existing *storev1.TaskRecord, created bool, err error) {
	var claim *writeClaim
	if e.dispatchOnSubmit {
		claim = &writeClaim{d: e.disp}
		_ = claim.run(rec.GetTask(), "", e.clock.Now(), nil)
	}
	began := e.clock.Now()
	if ofLatest {
		existing, created, err = e.store.CreateTaskOfLatest(ctx, rec)
	} else {
		existing, created, err = e.store.CreateTask(ctx, rec)
	}
	if err == nil || errors.Is(err, store.ErrStaleWorkflow) {
		// A wait for etcd; a write refused at once (the store's queue
		// full, out of space) or cut short by the caller is none.
		e.shed.wrote(e.clock.Since(began))
	}
	// Created: the agent gets the step. The id was taken: the existing
	// task is the answer, and the reservation is released.
	next := claim.settle(err, created, "claim on submit")
	if err != nil || !created {
		return existing, created, err
	}
	t := rec.GetTask()
	e.created(t.GetNamespace())
	e.tel.submittedOne(ctx, t.GetNamespace())
	e.tel.waitsStarted(nil, t) // a root step that waits from the start
	e.log.InfoContext(ctx, "task submitted", "task_id", t.GetId(), "namespace", t.GetNamespace(), "workflow", t.GetWorkflow().GetName())
	e.deliverClaim(rec, next)
	return existing, created, nil
}

// Reads through the task reader (etcd, then the archive).

// archivedRecord returns the record of an archived task, or notFound (the
// store's not-found error) when there is no archive or it does not hold the
// task.
func (e *engine) archivedRecord(ctx context.Context, ns, id string, notFound error) (*storev1.TaskRecord, error) {
	rec, err := e.tasks.Archived(ctx, ns, id)
	if errors.Is(err, taskread.ErrNotArchived) {
		return nil, notFound
	}
	return rec, err
}

// getTask returns a task's record from etcd or, when it is not there, from
// the archive.
func (e *engine) getTask(ctx context.Context, ns, id string) (*storev1.TaskRecord, error) {
	rec, _, err := e.tasks.Get(ctx, ns, id)
	return rec, err
}

// notInEtcd is the error of an action on a task etcd does not hold:
// TASK_TERMINAL when the archive holds it (it ended and moved there), the
// store's not-found error otherwise.
func (e *engine) notInEtcd(ctx context.Context, ns, id string, notFound error) error {
	if _, err := e.archivedRecord(ctx, ns, id, notFound); err != nil {
		return err
	}
	return fmt.Errorf("%w: task %q ended and was moved to the archive", taskstate.ErrTerminal, id)
}

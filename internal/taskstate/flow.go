package taskstate

import (
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// KeyWaiting reports whether a live task waits for a slot of its
// workflow's concurrency key (issue 36): its workflow has one and the task
// holds no slot of it. Nothing of a waiting task is dispatched. A task
// waiting for its start time (AwaitingStart) and holding no slot does not
// wait for one yet: it joins its key's queue when it starts (KeyQueuedAt).
func KeyWaiting(t *reevev1.Task) bool {
	if t.GetWorkflow().GetConcurrency() == nil || t.GetKeySlot() != 0 || TerminalTask(t.GetState()) {
		return false
	}
	_, awaiting := AwaitingStart(t)
	return !awaiting
}

// KeyQueuedAt is a waiting task's place in its key's queue: when it was
// submitted, or its start time when that is later (a delayed start queues
// behind the tasks submitted before it started).
func KeyQueuedAt(t *reevev1.Task) time.Time {
	at := t.GetCreateTime().AsTime()
	if st := t.GetStartTime(); st != nil && st.AsTime().After(at) {
		at = st.AsTime()
	}
	return at
}

// StartWaits starts the waits and sleeps of a task that no longer waits for
// its workflow key's slot: a step that waits from outside or sleeps and
// became ready while the task waited for the slot was queued like any
// step (never dispatched: the task's queued steps are not dispatchable
// while it waits); once the task holds the slot (at submission or when
// admitted) its wait or sleep begins. It changes nothing in any other task.
func StartWaits(t *reevev1.Task, now time.Time) {
	if KeyWaiting(t) || TerminalTask(t.GetState()) {
		return
	}
	for _, s := range t.GetSteps() {
		if s.GetState() != reevev1.StepState_STEP_STATE_PENDING || !Queued(s) {
			continue
		}
		if WaitsExternal(t, s) || workflow.IsSleep(Spec(t, s.GetName())) {
			dequeue(s)
			if !startSleep(t, s, now) {
				startWait(t, s, now)
			}
		}
	}
}

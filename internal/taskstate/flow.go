package taskstate

import (
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
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

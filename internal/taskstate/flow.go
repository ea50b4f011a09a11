package taskstate

import reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"

// KeyWaiting reports whether a live task waits for a slot of its
// workflow's concurrency key (issue 36): its workflow has one and the task
// holds no slot of it. Nothing of a waiting task is dispatched. A task
// waiting for its start time (issue 35) does not wait for a slot yet: it
// takes none before it starts, so that a task starting next week holds
// back no other task of its key until then.
func KeyWaiting(t *reevev1.Task) bool {
	if _, later := AwaitingStart(t); later {
		return false
	}
	return t.GetWorkflow().GetConcurrency() != nil && t.GetKeySlot() == 0 && !TerminalTask(t.GetState())
}

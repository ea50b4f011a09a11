package taskstate

import reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"

// KeyWaiting reports whether a live task waits for a slot of its
// workflow's concurrency key (issue 36): its workflow has one and the task
// holds no slot of it. Nothing of a waiting task is dispatched.
func KeyWaiting(t *reevev1.Task) bool {
	return t.GetWorkflow().GetConcurrency() != nil && t.GetKeySlot() == 0 && !TerminalTask(t.GetState())
}

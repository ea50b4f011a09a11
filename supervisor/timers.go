package supervisor

import (
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// decide is the leader's decision for one expired key of the deadline
// index: a timer's (a sleep that ends, a task that starts, a task past its
// deadline: taskstate.DecideTimer), else the step's policy
// (taskstate.Decide). Timers ride the same path as every expiry: the same
// pages, batches of decisionsPerCall per RecoverSteps call, callsInFlight
// calls at once, and the same fence.
func decide(t *reevev1.Task, key string, st *reevev1.Step) (taskstate.Action, time.Duration) {
	if a, ok := taskstate.DecideTimer(t, key); ok {
		return a, 0
	}
	return taskstate.Decide(t, st)
}

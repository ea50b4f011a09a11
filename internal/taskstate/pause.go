package taskstate

import (
	"errors"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Pausing a task (issue 37). A paused task keeps its state (PENDING,
// RUNNING or COMPENSATING) with Task.paused set, and none of its steps is
// dispatched until it is resumed:
//
//   - attempts already running go on: their results are recorded, and their
//     complete-by still holds (an attempt that expires is recovered as
//     usual; a retry it gets waits for the resume);
//   - steps that become ready (or are queued again) wait: a paused task has
//     no ready key and no schedule-to-start deadline key (the store's
//     indexes), and Claim refuses its steps, so no scheduler dispatches
//     them and no schedule-to-start timer runs;
//   - Resume queues its waiting steps again: each gets a fresh ready time
//     and its full schedule-to-start timeout (a backoff still running keeps
//     its not-before);
//   - ending the task (cancel, fail, compensate, its last step) clears the
//     pause: an undo an operator asks for runs at once.

// ErrPaused means the task is paused: its steps are not dispatched.
var ErrPaused = errors.New("taskstate: task is paused")

// PauseAccepts lists the task states PauseTask accepts.
var PauseAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING}

// Pause pauses a task that is not terminal. A paused task is left as it is
// (ErrNoChange).
func Pause(t *reevev1.Task, reason, actor string, now time.Time) error {
	if err := needsTask(t, "pause_task", PauseAccepts); err != nil {
		return err
	}
	if t.GetPaused() {
		return ErrNoChange
	}
	t.Paused = true
	addHistory(t, now, "task.paused", "", 0, actor, orReason(reason, "paused: no step is dispatched until the task is resumed"))
	return nil
}

// Resume resumes a paused task: its queued steps are queued again now, with
// their full schedule-to-start timeouts. A task that is not paused is left
// as it is (ErrNoChange).
func Resume(t *reevev1.Task, reason, actor string, now time.Time) error {
	if !t.GetPaused() {
		return ErrNoChange
	}
	unpause(t, now)
	addHistory(t, now, "task.resumed", "", 0, actor, orReason(reason, "resumed: its ready steps are dispatched again"))
	return nil
}

// ErrNoChange means an action found the task already as it asks (paused,
// or not paused): it changed nothing, and the caller answers with the task.
var ErrNoChange = errors.New("taskstate: nothing to change")

// unpause clears a task's pause and queues its waiting steps again.
func unpause(t *reevev1.Task, now time.Time) {
	if !t.GetPaused() {
		return
	}
	t.Paused = false
	for _, s := range t.GetSteps() {
		if Queued(s) {
			var notBefore time.Time
			if nb := s.GetNotBefore(); nb != nil && nb.AsTime().After(now) {
				notBefore = nb.AsTime()
			}
			enqueue(t, s, now, notBefore)
		}
	}
}

// Dispatchable reports whether the step's current execution may be
// dispatched now or once its backoff ends: it is queued and its task is not
// paused nor waiting for a slot of its concurrency key (flow.go).
func Dispatchable(t *reevev1.Task, s *reevev1.Step) bool {
	return Queued(s) && !t.GetPaused() && !KeyWaiting(t)
}

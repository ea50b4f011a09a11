package main

import (
	"strings"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// How task views show a step that waits for a completion from outside
// (issue 35): its type as "(external)", a deferred step's state as
// "RUNNING (deferred)", and what it waits for with since when (its
// complete-by is in the COMPLETE-BY column).

// waitShown is the TYPE and STATE a task view shows of step s (typ is its
// execution's type).
func waitShown(t *reevev1.Task, s *reevev1.Step, typ string) (string, string) {
	state := shortState(s.GetState(), "STEP_STATE_")
	if s.GetDeferred() {
		state += " (deferred)"
	}
	if typ == "" && taskstate.WaitsExternal(t, s) {
		typ = "(external)"
	}
	return typ, state
}

// awaitingWhat is the WAITING-FOR of a step that awaits a completion.
func awaitingWhat(s *reevev1.Step) string {
	if s.GetDeferred() {
		return "a completion with its token (deferred by its agent) since " + ts(s.GetWaitStartTime())
	}
	return "a completion from outside since " + ts(s.GetWaitStartTime())
}

// awaitingSteps is what a task list adds to a task's state when steps of
// it wait (WAITING, or deferred by their agent): " (waiting: approve)".
func awaitingSteps(t *reevev1.Task) string {
	if taskstate.TerminalTask(t.GetState()) {
		return ""
	}
	var names []string
	for _, s := range t.GetSteps() {
		// A list's tasks may come without their workflow's steps: the
		// step's own record says it waits (a sleep's too).
		if taskstate.Waiting(s) || s.GetDeferred() {
			names = append(names, s.GetName())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (waiting: " + strings.Join(names, ", ") + ")"
}

package chaos

import (
	"fmt"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// WaitReport counts what the run did with work that waits (issue 35).
type WaitReport struct {
	// Tasks ran workload.WorkflowWait; States counts them by final state.
	Tasks  int            `json:"tasks"`
	States map[string]int `json:"states"`
	// What the load's completions were answered: applied by token and by
	// name (CompletedWithError of them with an error), repeats answered as
	// the first, refused (the step no longer waited: expired, the task
	// ended), and waits the load left unanswered on purpose.
	CompletedByToken       int `json:"completed_by_token"`
	CompletedByName        int `json:"completed_by_name"`
	CompletedWithError     int `json:"completed_with_error"`
	RepeatsAnsweredAsFirst int `json:"repeats_answered_as_first"`
	CompletionsRefused     int `json:"completions_refused"`
	// TokensFromAgent: hook completions sent with the token the agent
	// passed on (workload.Callback), as soon as it was there;
	// BeforeDeferral of the completions recorded, those of an attempt
	// whose deferral was not recorded (yet): the agent still held it.
	TokensFromAgent int `json:"tokens_from_agent"`
	BeforeDeferral  int `json:"before_deferral"`
	LeftUnanswered  int `json:"left_unanswered"`
	// From the histories: completions from outside recorded, deferrals by
	// the agent, waits that expired (the supervisor escalated), sleeps
	// ended, delayed starts, task deadlines that fired.
	CompletedFromOutside int `json:"completed_from_outside"`
	Deferred             int `json:"deferred"`
	WaitsExpired         int `json:"waits_expired"`
	Sleeps               int `json:"sleeps"`
	DelayedStarts        int `json:"delayed_starts"`
	TaskTimeouts         int `json:"task_timeouts"`
}

// clockAllowance is what a timer check allows between the clocks of two
// processes: the chaos cluster runs on one host, so its processes read
// one clock, and times in the history are those of the writing process at
// the write (never earlier than the moment it acted on).
const clockAllowance = 50 * time.Millisecond

// outsideActor reports whether a history event's actor is a completion
// from outside (CompleteStep by token or by name: scheduler's
// completionActor).
func outsideActor(actor string) bool {
	return actor == "token" || actor == "approver" || strings.HasPrefix(actor, "token/") || strings.HasPrefix(actor, "approver/")
}

// outsideCompletion reports whether ev records a completion from outside.
func outsideCompletion(ev *reevev1.HistoryEvent) bool {
	return (ev.GetKind() == "step.succeeded" || ev.GetKind() == "step.failed") && outsideActor(ev.GetActor())
}

// checkTimers checks one task's waits and timers from its history:
// a completion from outside applied at most once per (step, attempt); a
// sleep never ends before its time; a delayed task has no step made ready,
// dispatched, waiting or sleeping before its start time; a task deadline
// never fires before it passed; and an ended task has no step left
// waiting, sleeping or deferred.
func checkTimers(t *reevev1.Task, rep *Report) {
	id := t.GetId()
	outside := map[execKey]int{}
	sleepingAt := map[execKey]time.Time{}
	deferred := map[execKey]bool{}
	start := t.GetStartTime()
	for _, ev := range t.GetHistory() {
		k := execKey{ev.GetStep(), ev.GetAttempt()}
		at := ev.GetTime().AsTime()
		switch ev.GetKind() {
		case "step.sleeping":
			sleepingAt[k] = at
		case "step.succeeded":
			if from, ok := sleepingAt[k]; ok {
				rep.Waits.Sleeps++
				sleep := taskstate.Spec(t, ev.GetStep()).GetSleep().AsDuration()
				if at.Add(clockAllowance).Before(from.Add(sleep)) {
					rep.add(Violation{Invariant: "a sleep never ends early", Task: id, Step: ev.GetStep(), Attempt: ev.GetAttempt(),
						Detail: fmt.Sprintf("slept from %s, woke at %s: %v of its %v", from.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), at.Sub(from), sleep)})
				}
			}
		case "step.deferred":
			rep.Waits.Deferred++
			deferred[k] = true
		case "step.expired":
			if taskstate.WaitsExternal(t, &reevev1.Step{Name: ev.GetStep()}) {
				rep.Waits.WaitsExpired++
			}
		case "task.started":
			rep.Waits.DelayedStarts++
		case "task.timed_out":
			rep.Waits.TaskTimeouts++
			if d := t.GetDeadline(); d == nil || at.Add(clockAllowance).Before(d.AsTime()) {
				rep.add(Violation{Invariant: "a task deadline never fires early", Task: id, Detail: fmt.Sprintf("timed out at %s, deadline %v", at.Format(time.RFC3339Nano), d.AsTime())})
			}
		}
		switch ev.GetKind() {
		case "step.ready", "step.dispatched", "step.waiting", "step.sleeping":
			if start != nil && at.Add(clockAllowance).Before(start.AsTime()) {
				rep.add(Violation{Invariant: "a delayed task starts at its start time", Task: id, Step: ev.GetStep(), Attempt: ev.GetAttempt(),
					Detail: fmt.Sprintf("%s at %s, before its start time %s", ev.GetKind(), at.Format(time.RFC3339Nano), start.AsTime().Format(time.RFC3339Nano))})
			}
		}
		if outsideCompletion(ev) {
			outside[k]++
			rep.Waits.CompletedFromOutside++
			if !deferred[k] && !taskstate.WaitsExternal(t, &reevev1.Step{Name: ev.GetStep()}) {
				rep.Waits.BeforeDeferral++
			}
		}
	}
	for k, n := range outside {
		if n > 1 {
			rep.add(Violation{Invariant: "a completion is applied once", Task: id, Step: k.step, Attempt: k.attempt, Detail: fmt.Sprintf("completed from outside %d times", n)})
		}
	}
	if taskstate.TerminalTask(t.GetState()) {
		for _, s := range t.GetSteps() {
			if taskstate.Waiting(s) || s.GetDeferred() && s.GetState() == reevev1.StepState_STEP_STATE_RUNNING {
				rep.add(Violation{Invariant: "every wait ends", Task: id, Step: s.GetName(), Attempt: s.GetAttempt(),
					Detail: fmt.Sprintf("the task is %s, the step still %s (deferred %v)", t.GetState(), s.GetState(), s.GetDeferred())})
			}
		}
	}
}

// checkApplied checks that every completion the load had answered OK is
// in its task's history: one completion from outside of that attempt,
// with the outcome the answer named (a completion answered and lost would
// be a wedged or wrong task).
func checkApplied(tasks map[string]*reevev1.Task, log *waitLog, rep *Report) {
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, c := range log.applied {
		t := tasks[c.Task]
		if t == nil {
			continue // reported missing
		}
		want := "step.succeeded"
		if c.State == reevev1.StepState_STEP_STATE_FAILED {
			want = "step.failed"
		}
		found := 0
		for _, ev := range t.GetHistory() {
			if outsideCompletion(ev) && ev.GetStep() == c.Step && ev.GetAttempt() == c.Attempt {
				found++
				if ev.GetKind() != want {
					rep.add(Violation{Invariant: "an answered completion is applied", Task: c.Task, Step: c.Step, Attempt: c.Attempt,
						Detail: fmt.Sprintf("answered %s, recorded %s", c.State, ev.GetKind())})
				}
			}
		}
		if found != 1 {
			rep.add(Violation{Invariant: "an answered completion is applied", Task: c.Task, Step: c.Step, Attempt: c.Attempt,
				Detail: fmt.Sprintf("answered OK (%s, by name %v), recorded %d times in the history", c.State, c.ByName, found)})
		}
	}
}

// writeWaits adds the WaitReport's rows to the table.
func (r *Report) writeWaits(row func(string, any)) {
	w := r.Waits
	row("tasks with waits (chaos.wait)", w.Tasks)
	for _, k := range sortedKeys(w.States) {
		row("  ended "+k, w.States[k])
	}
	row("  completions applied by token / by name", fmt.Sprintf("%d / %d", w.CompletedByToken, w.CompletedByName))
	row("  of which with an error", w.CompletedWithError)
	row("  repeats answered as the first", w.RepeatsAnsweredAsFirst)
	row("  hook tokens passed on by the agent and sent at once", w.TokensFromAgent)
	row("  completed before the agent's deferral was recorded", w.BeforeDeferral)
	row("  completions refused (no longer waiting)", w.CompletionsRefused)
	row("  waits left unanswered on purpose", w.LeftUnanswered)
	row("  completed from outside (histories)", w.CompletedFromOutside)
	row("  deferred by the agent", w.Deferred)
	row("  waits expired (supervisor escalated)", w.WaitsExpired)
	row("  sleeps ended", w.Sleeps)
	row("  delayed starts", w.DelayedStarts)
	row("  task deadlines fired", w.TaskTimeouts)
}

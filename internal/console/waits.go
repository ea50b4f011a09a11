package console

import (
	"net/http"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// waitLine is one thing a task waits for, as its page says it above the
// timeline: a person's approval, a sleep, an agent's hand-off, its start
// time, a slot of a limited or paused queue.
type waitLine struct {
	Kind string // approval, sleep, deferred, start, deadline, queue
	Step string // "" for the task's own waits
	Text string // "waiting for approval since 10:02, complete-by 12:02"
	Due  string // "in 1h58m", "overdue 3m"
	Late bool
	// Complete: the viewer may approve or reject it (by name).
	Complete bool
}

// taskWaits says what t waits for, at now. mayApprove is asked (one API
// call per session and namespace, cached) only when a step can be completed
// by name.
func (s *Server) taskWaits(r *http.Request, ss *session, t *reevev1.Task, archived bool, now time.Time) []waitLine {
	if taskstate.TerminalTask(t.GetState()) {
		return nil
	}
	due := func(at time.Time) (string, bool) {
		d := at.Sub(now)
		if d < 0 {
			return "overdue " + fmtDur(d), true
		}
		return "in " + fmtDur(d), false
	}
	var out []waitLine
	if at, ok := taskstate.AwaitingStart(t); ok {
		l := waitLine{Kind: "start", Text: "waiting to start at " + clockTime(now, at)}
		l.Due, l.Late = due(at)
		out = append(out, l)
	}
	approver, asked := false, false
	for _, st := range t.GetSteps() {
		var l waitLine
		since := st.GetWaitStartTime()
		if since == nil {
			since = st.GetReadyTime()
		}
		by := st.GetCompleteBy().AsTime()
		switch {
		case waitsForPerson(t, st):
			l = waitLine{Kind: "approval", Text: "waiting for approval since " + clockTime(now, since.AsTime()) + ", complete-by " + clockTime(now, by)}
		case taskstate.Waiting(st) && workflow.IsSleep(taskstate.Spec(t, st.GetName())):
			l = waitLine{Kind: "sleep", Text: "sleeping until " + clockTime(now, by)}
		case taskstate.Waiting(st):
			l = waitLine{Kind: "wait", Text: "waiting since " + clockTime(now, since.AsTime()) + ", complete-by " + clockTime(now, by)}
		case st.GetDeferred() && st.GetState() == reevev1.StepState_STEP_STATE_RUNNING:
			l = waitLine{Kind: "deferred", Text: "handed off by its agent since " + clockTime(now, since.AsTime()) + " (completed with its token, e.g. by a webhook), complete-by " + clockTime(now, by)}
		case st.GetWaitReason() != "":
			out = append(out, waitLine{Kind: "queue", Step: st.GetName(), Text: st.GetWaitReason()})
			continue
		default:
			continue
		}
		l.Step = st.GetName()
		l.Due, l.Late = due(by)
		if !archived && taskstate.Awaiting(t, st) {
			if !asked {
				approver, asked = s.mayApprove(r.Context(), ss, t.GetNamespace()), true
			}
			l.Complete = approver
		}
		out = append(out, l)
	}
	if at, ok := taskstate.TaskDeadline(t); ok {
		l := waitLine{Kind: "deadline", Text: "the whole task must end by " + clockTime(now, at)}
		l.Due, l.Late = due(at)
		out = append(out, l)
	}
	return out
}

// stepKind says what runs a step that no agent type names: "waitFor:
// external", "sleep 30m"; "" for an agent's step.
func stepKind(t *reevev1.Task, st *reevev1.Step) string {
	spec := taskstate.Spec(t, st.GetName())
	switch {
	case st.GetCompensation():
		return ""
	case workflow.WaitsExternal(spec):
		return "waitFor: external"
	case workflow.IsSleep(spec):
		return "sleep " + fmtDur(spec.GetSleep().AsDuration())
	}
	return ""
}

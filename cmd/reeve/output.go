package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// printJSON prints the protojson of m, indented.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// printJSONObject prints a report (a Go struct with json tags) as one JSON
// object on one line, as the bench commands' -o json promises.
func printJSONObject(w io.Writer, rep any) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// printJSONLine prints the protojson of m on one line.
func printJSONLine(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func workflowName(w *reevev1.Workflow) string {
	name := orDash(w.GetName())
	if w.GetName() == "" {
		name = "(inline)"
	}
	if w.GetVersion() > 0 {
		name = fmt.Sprintf("%s@%d", name, w.GetVersion())
	}
	return name
}

// printTask prints a task as an operator reads it: header, steps, history.
// agents are the namespace's connected agents: a dispatched step whose
// agent is not among them is marked "(disconnected)" (its execution is
// recovered at its complete-by, or sooner with a heartbeat timeout or
// reassign_after_disconnect), and a queued step whose type none of them
// serves waits for "no agent serves TYPE; agents serve ...". nil: not
// known, no mark.
func printTask(w io.Writer, t *reevev1.Task, agents *namespaceAgents) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ID:\t%s\n", t.GetId())
	fmt.Fprintf(tw, "NAMESPACE:\t%s\n", t.GetNamespace())
	fmt.Fprintf(tw, "WORKFLOW:\t%s\n", workflowName(t.GetWorkflow()))
	state := shortState(t.GetState(), "TASK_STATE_")
	if t.GetPaused() {
		state += " (paused: no step is dispatched until 'reeve task resume')"
	}
	fmt.Fprintf(tw, "STATE:\t%s\n", state)
	if t.GetRerunOf() != "" {
		fmt.Fprintf(tw, "RERUN OF:\t%s\n", t.GetRerunOf())
	}
	fmt.Fprintf(tw, "CREATED:\t%s\n", ts(t.GetCreateTime()))
	if start, deadline := timerLines(t); start != "" || deadline != "" { // timers.go
		fmt.Fprintf(tw, "STARTS:\t%s\n", orDash(start))
		fmt.Fprintf(tw, "DEADLINE:\t%s\n", orDash(deadline))
	}
	fmt.Fprintf(tw, "ENDED:\t%s\n", ts(t.GetEndTime()))
	fmt.Fprintf(tw, "REASON:\t%s\n", orDash(t.GetReason()))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSTEPS")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tSTATE\tATTEMPT\tFAILURES\tCOMPLETE-BY\tAGENT\tWAITING-FOR\tERROR")
	for _, s := range t.GetSteps() {
		typ, attempt := execution(t, s)
		if typ == "" {
			typ = specType(taskstate.Spec(t, s.GetName())) // a sleep step (timers.go)
		}
		typ, state := waitShown(t, s, typ) // taskwait.go
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.GetName(), typ, state,
			attempt, s.GetFailureCount(), ts(s.GetCompleteBy()), stepAgent(s, agents), waitingFor(t, s, agents), orDash(oneLine(taskstate.ErrorText(s.GetLastError()))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHISTORY")
	if t.GetHistoryDropped() > 0 {
		fmt.Fprintf(w, "(%d older events dropped)\n", t.GetHistoryDropped())
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tSTEP\tATTEMPT\tACTOR\tMESSAGE")
	for _, h := range t.GetHistory() {
		attempt := "-"
		if h.GetAttempt() > 0 {
			attempt = fmt.Sprint(h.GetAttempt())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.GetTime().AsTime().UTC().Format(time.RFC3339Nano), h.GetKind(), orDash(h.GetStep()), attempt, orDash(h.GetActor()), orDash(oneLine(h.GetMessage())))
	}
	return tw.Flush()
}

// stepAgent is the agent holding the step, marked when it is known to be
// disconnected (see printTask).
func stepAgent(s *reevev1.Step, agents *namespaceAgents) string {
	a := s.GetLockedByAgent()
	if taskstate.Dispatched(s) && agents.disconnected(a) {
		return a + " (disconnected)"
	}
	return orDash(a)
}

// waitingFor says what a step that has not started waits for: its
// dependencies, or (queued) an agent of its execution type — "no agent
// serves TYPE; ..." when agents says none does — with its backoff and
// schedule-to-start deadline.
func waitingFor(t *reevev1.Task, s *reevev1.Step, agents *namespaceAgents) string {
	if w := timerWaitingFor(t, s); w != "" { // timers.go
		return w
	}
	switch {
	case taskstate.Awaiting(t, s):
		return awaitingWhat(s) // taskwait.go
	case taskstate.Queued(s) && t.GetPaused():
		return "the task to be resumed (paused)"
	case taskstate.Queued(s):
		w, sep := "agent of type "+taskstate.ExecutionType(t, s), ", "
		if u := agents.unserved(t, s); u != "" {
			w, sep = u, "; "
		}
		if nb := s.GetNotBefore(); nb != nil && nb.AsTime().After(s.GetReadyTime().AsTime()) {
			w += sep + "not before " + ts(nb)
		}
		if d := s.GetScheduleToStartDeadline(); d != nil {
			w += sep + "supervisor acts at " + ts(d)
		}
		return w
	case s.GetState() == reevev1.StepState_STEP_STATE_PENDING && s.GetReadyTime() == nil:
		return "dependencies"
	}
	return "-"
}

func printTaskList(w io.Writer, tasks []*reevev1.Task, next string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATE\tCREATED\tENDED")
	for _, t := range tasks {
		state := shortState(t.GetState(), "TASK_STATE_")
		if t.GetPaused() {
			state += " (paused)"
		}
		state = listState(t, state) // timers.go
		state += awaitingSteps(t)   // taskwait.go
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.GetId(), workflowName(t.GetWorkflow()), state, ts(t.GetCreateTime()), ts(t.GetEndTime()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(w, "(more: --page-token %s)\n", next)
	}
	return nil
}

func printWorkflow(w io.Writer, wf *reevev1.Workflow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME:\t%s\n", wf.GetName())
	fmt.Fprintf(tw, "VERSION:\t%d\n", wf.GetVersion())
	fmt.Fprintf(tw, "NAMESPACE:\t%s\n", wf.GetNamespace())
	fmt.Fprintf(tw, "CREATED:\t%s\n", ts(wf.GetCreateTime()))
	fmt.Fprintf(tw, "DESCRIPTION:\t%s\n", orDash(wf.GetDescription()))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSTEPS")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tDEPENDS-ON\tTIMEOUT\tCOMPENSATION\tESCALATION")
	for _, s := range wf.GetSteps() {
		timeout := "-"
		if s.GetTimeout() != nil {
			timeout = s.GetTimeout().AsDuration().String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.GetName(), specType(s), orDash(strings.Join(s.GetDependsOn(), ",")), timeout,
			orDash(s.GetCompensation().GetType()), escalation(wf, s))
	}
	return tw.Flush()
}

// execution returns the type and attempt shown for step s: once its
// compensation started (COMPENSATING, COMPENSATED, or FAILED undoing it),
// the compensation's type marked "(compensation)" and the compensation's
// own attempt, counted from 1 (the step's attempt goes on from its forward
// attempts); otherwise the step's type and attempt.
func execution(t *reevev1.Task, s *reevev1.Step) (string, int32) {
	typ, attempt := taskstate.Shown(t, s)
	if s.GetCompensation() {
		typ += " (compensation)"
	}
	return typ, attempt
}

// escalation is what step s does when it fails for good: its escalation,
// or the default it gets (workflow.EffectiveEscalation) marked so.
func escalation(wf *reevev1.Workflow, s *reevev1.StepSpec) string {
	e := shortState(workflow.EffectiveEscalation(wf, s), "ESCALATION_")
	if s.GetEscalation() == reevev1.Escalation_ESCALATION_UNSPECIFIED {
		return e + " (default)"
	}
	return e
}

func printWorkflowList(w io.Writer, wfs []*reevev1.Workflow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tSTEPS\tCREATED")
	for _, wf := range wfs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", wf.GetName(), wf.GetVersion(), len(wf.GetSteps()), ts(wf.GetCreateTime()))
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// maxBulk bounds a bulk action: at most this many tasks per confirmation.
const maxBulk = 500

// maxBulkExamined bounds the tasks a bulk action "all matching this filter"
// lists to find its maxBulk: archived ones are left out, and a filter that
// matches many of them must not list the whole archive.
const maxBulkExamined = 10 * maxBulk

var actionTitles = map[string]string{
	"cancel":           "Cancel task",
	"cancel-keep-done": "Cancel without undoing",
	"pause":            "Pause task",
	"resume":           "Resume task",
	"retry":            "Retry failed step",
	"compensate":       "Compensate task",
}

type confirmData struct {
	pageData
	Action, ActionTitle string
	T                   *reevev1.Task
	Step                string
	Explain             string
	// RequestID makes a second post of the form (a reload, a double
	// click) return the task instead of acting again (operator actions).
	RequestID string
}

// confirmTaskAction shows what an action will do and asks for a reason; the
// form posts to the same URL.
func (s *Server) confirmTaskAction(w http.ResponseWriter, r *http.Request, ss *session) {
	action := r.PathValue("action")
	title, ok := actionTitles[action]
	if !ok {
		s.renderError(w, r, ss, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
		return
	}
	t, archived, ok := s.getTask(w, r, ss)
	if !ok {
		return
	}
	if archived {
		s.renderError(w, r, ss, http.StatusConflict, "Archived", "Task "+t.GetId()+" ended and moved to the archive of finished tasks: it is read-only.")
		return
	}
	d := confirmData{pageData: s.page(r, ss, title, "tasks", t.GetNamespace()), Action: action, ActionTitle: title, T: t, Step: r.URL.Query().Get("step"), RequestID: uuid.NewString()}
	if !d.Operator {
		s.renderError(w, r, ss, http.StatusForbidden, "Not allowed", "Your identity may not use operator actions in namespace "+t.GetNamespace()+".")
		return
	}
	switch action {
	case "cancel":
		d.Explain = "Running steps are told to stop; pending steps never start. Steps that succeeded and declare a compensation are undone, in reverse order, and the task ends COMPENSATED; with nothing to undo it ends CANCELED. A task already compensating finishes its undo."
	case "pause":
		d.Explain = "None of its steps is dispatched until the task is resumed. Running steps go on and report; their complete-by still holds. Steps that become ready wait, and their schedule-to-start timers stop."
	case "resume":
		d.Explain = "Its ready steps are dispatched again; their schedule-to-start timers start over."
	case "cancel-keep-done":
		d.Explain = "Running steps are told to stop; pending steps never start. The task ends CANCELED at once and nothing is undone; it can be compensated later while it stays in etcd for the retention."
	case "retry":
		d.Explain = fmt.Sprintf("Step %q runs again with its failure count reset; the task resumes.", d.Step)
	case "compensate":
		d.Explain = "Running steps are canceled, steps never started are skipped, and succeeded steps are undone by their compensations in reverse order."
	}
	s.render(w, r, http.StatusOK, "confirm", d)
}

// taskAction applies a confirmed action and shows the task.
func (s *Server) taskAction(w http.ResponseWriter, r *http.Request, ss *session) {
	action := r.PathValue("action")
	if _, ok := actionTitles[action]; !ok {
		s.renderError(w, r, ss, http.StatusNotFound, "Not found", "There is no action "+action+".")
		return
	}
	ns := workflow.Namespace(r.PostFormValue("ns"))
	if !s.requireOperator(w, r, ss, ns) {
		return
	}
	id := r.PathValue("id")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if len(reason) > workflow.MaxReasonBytes {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("reason: at most %d bytes", workflow.MaxReasonBytes))
		return
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	if err := s.apply(ctx, opts, action, ns, id, r.PostFormValue("step"), reason, r.PostFormValue("request_id")); err != nil {
		s.apiError(w, r, ss, fmt.Sprintf("%s task %q", action, id), err)
		return
	}
	s.log.InfoContext(ctx, "console: operator action", "action", action, "namespace", ns, "task_id", id)
	http.Redirect(w, r, "/tasks/"+url.PathEscape(id)+"?ns="+url.QueryEscape(ns), http.StatusSeeOther)
}

// requireOperator refuses (403) a state-changing request of a session whose
// identity may not use operator actions in ns: the console enforces what it
// shows, and the scheduler checks every call again.
func (s *Server) requireOperator(w http.ResponseWriter, r *http.Request, ss *session, ns string) bool {
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return false
	}
	if !s.mayOperate(r.Context(), ss, ns) {
		s.renderError(w, r, ss, http.StatusForbidden, "Not allowed", "Your identity may not use operator actions in namespace "+ns+".")
		return false
	}
	return true
}

// apply runs one operator action through the API. An empty step for retry
// means the task's first FAILED step; requestID (may be empty) is the
// operator action's request_id.
func (s *Server) apply(ctx context.Context, opts []grpc.CallOption, action, ns, id, step, reason, requestID string) error {
	if reason == "" {
		reason = action + " from the console"
	}
	switch action {
	case "cancel", "cancel-keep-done":
		_, err := s.sched.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: ns, TaskId: id, Reason: reason, NoCompensate: action == "cancel-keep-done"}, opts...)
		return err
	case "pause":
		_, err := s.sup.PauseTask(ctx, &reevev1.PauseTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID}, opts...)
		return err
	case "resume":
		_, err := s.sup.ResumeTask(ctx, &reevev1.ResumeTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID}, opts...)
		return err
	case "compensate":
		_, err := s.sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{Namespace: ns, TaskId: id, Reason: reason, RequestId: requestID}, opts...)
		return err
	case "retry":
		if step == "" {
			resp, err := s.sched.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: ns, TaskId: id}, opts...)
			if err != nil {
				return err
			}
			for _, st := range resp.GetTask().GetSteps() {
				if st.GetState() == reevev1.StepState_STEP_STATE_FAILED {
					step = st.GetName()
					break
				}
			}
			if step == "" {
				return status.Error(codes.FailedPrecondition, "step: the task has no FAILED step")
			}
		}
		_, err := s.sup.RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: ns, TaskId: id, Step: step, Reason: reason, RequestId: requestID}, opts...)
		return err
	}
	return fmt.Errorf("unknown action %q", action)
}

type bulkData struct {
	pageData
	Action, ActionTitle string
	IDs                 []string
	More                bool // the filter matched more than maxBulk
	Archived            int  // tasks of the filter left out: in the archive of finished tasks, read-only
	Scope               string
	FilterQuery         string
	Results             []bulkResult
	Done, Failed        int
}

type bulkResult struct {
	ID, Error string
}

// bulkConfirm lists the tasks a bulk action will touch: the selected rows,
// or every task matching the filter (at most maxBulk, newest first).
func (s *Server) bulkConfirm(w http.ResponseWriter, r *http.Request, ss *session) {
	action := r.PostFormValue("action")
	title, ok := actionTitles[action]
	if !ok {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("action: want cancel, retry or compensate, got %q", action))
		return
	}
	q, _ := url.ParseQuery(r.PostFormValue("filter"))
	f, err := parseTaskFilter(q)
	if err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := bulkData{pageData: s.page(r, ss, "Bulk: "+title, "tasks", f.NS), Action: action, ActionTitle: title, Scope: r.PostFormValue("scope"), FilterQuery: f.FilterQuery()}
	if !d.Operator {
		s.renderError(w, r, ss, http.StatusForbidden, "Not allowed", "Your identity may not use operator actions in namespace "+f.NS+".")
		return
	}
	switch d.Scope {
	case "selected":
		d.IDs = r.PostForm["id"]
		if len(d.IDs) == 0 {
			s.renderError(w, r, ss, http.StatusBadRequest, "Nothing selected", "id: select at least one task, or use \"all matching this filter\".")
			return
		}
		if len(d.IDs) > maxBulk {
			s.renderError(w, r, ss, http.StatusBadRequest, "Too many", fmt.Sprintf("id: at most %d tasks per bulk action, got %d", maxBulk, len(d.IDs)))
			return
		}
	case "filter":
		ctx, cancel, opts := s.call(r, ss)
		defer cancel()
		var page string
		for examined := 0; len(d.IDs) <= maxBulk; {
			if examined >= maxBulkExamined {
				d.More = true // the rest is not looked at
				break
			}
			p, err := s.listTasks(ctx, opts, f, maxBulk, page)
			if err != nil {
				s.apiError(w, r, ss, "list tasks", err)
				return
			}
			examined += len(p.Tasks)
			for _, t := range p.Tasks {
				if p.Archived[t.GetId()] {
					d.Archived++ // read-only: no action applies
					continue
				}
				d.IDs = append(d.IDs, t.GetId())
			}
			if page = p.Next; page == "" {
				break
			}
		}
		if len(d.IDs) > maxBulk {
			d.IDs, d.More = d.IDs[:maxBulk], true
		}
		if len(d.IDs) == 0 && d.Archived > 0 {
			msg := fmt.Sprintf("The %d tasks matching this filter ended and moved to the archive of finished tasks: they are read-only.", d.Archived)
			if d.Archived == 1 {
				msg = "The one task matching this filter ended and moved to the archive of finished tasks: it is read-only."
			}
			s.renderError(w, r, ss, http.StatusConflict, "Nothing to act on", msg)
			return
		}
	default:
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("scope: want selected or filter, got %q", d.Scope))
		return
	}
	for _, id := range d.IDs {
		if err := workflow.ValidateTaskID("id", id); err != nil {
			s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
			return
		}
	}
	s.render(w, r, http.StatusOK, "bulk", d)
}

// bulkApply applies a confirmed bulk action to the listed tasks, one call
// each, and reports every outcome.
func (s *Server) bulkApply(w http.ResponseWriter, r *http.Request, ss *session) {
	action := r.PostFormValue("action")
	title, ok := actionTitles[action]
	if !ok {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("action: want cancel, retry or compensate, got %q", action))
		return
	}
	ns := workflow.Namespace(r.PostFormValue("ns"))
	if !s.requireOperator(w, r, ss, ns) {
		return
	}
	ids := r.PostForm["id"]
	if len(ids) == 0 || len(ids) > maxBulk {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("id: between 1 and %d tasks, got %d", maxBulk, len(ids)))
		return
	}
	d := bulkData{pageData: s.page(r, ss, "Bulk: "+title, "tasks", ns), Action: action, ActionTitle: title, FilterQuery: r.PostFormValue("filter")}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if len(reason) > workflow.MaxReasonBytes {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("reason: at most %d bytes", workflow.MaxReasonBytes))
		return
	}
	for _, id := range ids {
		ctx, cancel, opts := s.call(r, ss)
		err := s.apply(ctx, opts, action, ns, id, "", reason, "")
		cancel()
		res := bulkResult{ID: id}
		if err != nil {
			res.Error = status.Convert(err).Message()
			d.Failed++
		} else {
			d.Done++
		}
		d.Results = append(d.Results, res)
	}
	s.log.InfoContext(r.Context(), "console: bulk action", "action", action, "namespace", ns, "tasks", len(ids), "failed", d.Failed)
	s.render(w, r, http.StatusOK, "bulk-done", d)
}

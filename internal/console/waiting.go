package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The Waiting view (issue 35): the steps of a namespace that wait for a
// completion from outside (StepSpec.wait_for "external", WAITING; or handed
// off by their agent), from the API's waiting index (ListWaitingSteps), and
// the page that completes one (approve with an output, reject with an error
// code) through CompleteStep by name, for the namespace's admin or approver
// role.

const (
	// waitingPageRows is how many waiting steps the Waiting view shows a
	// page (ListWaitingSteps' page size).
	waitingPageRows = 100
	// waitingPageSize is the page size of the ListTasks calls that look for
	// waiting steps against a scheduler without ListWaitingSteps (the
	// API's largest).
	waitingPageSize = 1000
	// maxWaitingExamined bounds the RUNNING tasks one view of the Waiting
	// page reads (five ListTasks calls of TASK_VIEW_BASIC); past it the page
	// says that it looked no further.
	maxWaitingExamined = 5 * waitingPageSize
	// maxWaitingTasks bounds the tasks with a step waiting for a
	// completion that one view reads in full (GetTask: the list's basic
	// view has no workflow snapshot to tell a wait for a person from a
	// sleep).
	maxWaitingTasks = 200
	// defaultApproval is the output the approve form starts with.
	defaultApproval = `{"approved": true}`
)

// waitingStep is one step waiting for a completion from outside, as the
// Waiting view and the completion page show it.
type waitingStep struct {
	TaskID, Workflow, Step string
	Attempt                int32
	Deferred               bool // handed off by its agent rather than WAITING
	Since                  time.Time
	CompleteBy             time.Time
	Due                    string // "in 1h58m" or "overdue 3m"
	Overdue                bool
}

type waitingData struct {
	pageData
	Approver bool
	Workflow string // only steps of this workflow (filtered on the page)
	Steps    []waitingStep
	Next     string // the next page's token (ListWaitingSteps)
	// Scanned: the scheduler has no ListWaitingSteps, the page looked
	// through the RUNNING tasks (Examined listed, Read read in full).
	Scanned  bool
	Examined int
	Read     int
	More     bool // the scan stopped at maxWaitingExamined or maxWaitingTasks
}

// mayApprove reports whether the session's identity may complete steps by
// name in namespace ns (the admin or approver role): the console asks the
// API once per namespace with a GetCompletionToken that names no task, which
// the scheduler refuses with PERMISSION_DENIED before reading anything when
// the role is missing, and with INVALID_ARGUMENT (task_id) otherwise. The
// scheduler checks every completion again.
func (s *Server) mayApprove(ctx context.Context, ss *session, ns string) bool {
	if s.readOnly {
		return false
	}
	ss.mu.Lock()
	v, ok := ss.approver[ns]
	ss.mu.Unlock()
	if ok {
		return v
	}
	_, err := s.sched.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{Namespace: ns}, ss.callOpts()...)
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OK:
		v = true
	case codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		v = false
	default:
		return false // unknown: ask again next time
	}
	ss.mu.Lock()
	ss.approver[ns] = v
	ss.mu.Unlock()
	return v
}

// waitsForPerson reports whether st of t waits for a completion from
// outside by a person: WAITING on a wait_for "external" step.
func waitsForPerson(t *reevev1.Task, st *reevev1.Step) bool {
	return taskstate.Waiting(st) && taskstate.WaitsExternal(t, st)
}

func (s *Server) newWaitingStep(taskID, wf, step string, attempt int32, deferred bool, since, by time.Time) waitingStep {
	w := waitingStep{TaskID: taskID, Workflow: wf, Step: step, Attempt: attempt, Deferred: deferred, Since: since, CompleteBy: by}
	if !by.IsZero() {
		d := by.Sub(s.now())
		w.Overdue = d < 0
		if w.Overdue {
			w.Due = "overdue " + fmtDur(d)
		} else {
			w.Due = "in " + fmtDur(d)
		}
	}
	return w
}

// stepWaiting is the waitingStep of st, a step of t.
func (s *Server) stepWaiting(t *reevev1.Task, st *reevev1.Step) waitingStep {
	since := st.GetWaitStartTime()
	if since == nil {
		since = st.GetReadyTime()
	}
	var from, by time.Time
	if since != nil {
		from = since.AsTime()
	}
	if st.GetCompleteBy() != nil {
		by = st.GetCompleteBy().AsTime()
	}
	return s.newWaitingStep(t.GetId(), t.GetWorkflow().GetName(), st.GetName(), st.GetAttempt(), st.GetDeferred(), from, by)
}

// waitingPage lists the steps waiting for a completion from outside (for
// a person, or handed off by their agent), the longest waiting first, 100
// a page, from the API's waiting index (ListWaitingSteps: one call, O(page)).
// Against a scheduler without it, it looks through the RUNNING tasks
// instead (scanWaiting).
func (s *Server) waitingPage(w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	ns := workflow.Namespace(q.Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := waitingData{pageData: s.page(r, ss, "Waiting", "waiting", ns), Workflow: strings.TrimSpace(q.Get("workflow"))}
	d.Approver = s.mayApprove(r.Context(), ss, ns)
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.ListWaitingSteps(ctx, &reevev1.ListWaitingStepsRequest{Namespace: ns, PageSize: waitingPageRows, PageToken: q.Get("page")}, opts...)
	switch status.Code(err) {
	case codes.OK:
		for _, ws := range resp.GetSteps() {
			if d.Workflow != "" && ws.GetWorkflow() != d.Workflow {
				continue
			}
			d.Steps = append(d.Steps, s.newWaitingStep(ws.GetRef().GetTaskId(), ws.GetWorkflow(), ws.GetRef().GetStep(), ws.GetRef().GetAttempt(),
				ws.GetDeferred(), ws.GetWaitStartTime().AsTime(), ws.GetCompleteBy().AsTime()))
		}
		d.Next = resp.GetNextPageToken()
	case codes.Unimplemented:
		if !s.scanWaiting(w, r, ss, &d) {
			return
		}
	default:
		s.apiError(w, r, ss, "list waiting steps", err)
		return
	}
	s.render(w, r, http.StatusOK, "waiting", d)
}

// scanWaiting fills d for a scheduler without ListWaitingSteps: it lists
// the namespace's RUNNING tasks (TASK_VIEW_BASIC, 1,000 a call, at most
// maxWaitingExamined), reads those with a WAITING step that began a wait
// in full (at most maxWaitingTasks: one GetTask each) and keeps their steps
// that wait for a person, the one whose complete-by comes first on top.
func (s *Server) scanWaiting(w http.ResponseWriter, r *http.Request, ss *session, d *waitingData) bool {
	d.Scanned = true
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	for page := ""; ; {
		if d.Examined >= maxWaitingExamined {
			d.More = true
			break
		}
		resp, err := s.sched.ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: d.NS, State: reevev1.TaskState_TASK_STATE_RUNNING,
			Workflow: d.Workflow, PageSize: waitingPageSize, PageToken: page, View: reevev1.TaskView_TASK_VIEW_BASIC}, opts...)
		if err != nil {
			s.apiError(w, r, ss, "list running tasks", err)
			return false
		}
		d.Examined += len(resp.GetTasks())
		for _, t := range resp.GetTasks() {
			// The basic view has no workflow snapshot: a step WAITING
			// since a wait began (wait_start_time; a sleep has none) is
			// looked at in full.
			if !slices.ContainsFunc(t.GetSteps(), func(st *reevev1.Step) bool { return taskstate.Waiting(st) && st.GetWaitStartTime() != nil }) {
				continue
			}
			if d.Read >= maxWaitingTasks {
				d.More = true
				continue
			}
			d.Read++
			full, err := s.sched.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: d.NS, TaskId: t.GetId()}, opts...)
			if status.Code(err) == codes.NotFound {
				continue // ended and gone since the list
			} else if err != nil {
				s.apiError(w, r, ss, fmt.Sprintf("task %q", t.GetId()), err)
				return false
			}
			for _, st := range full.GetTask().GetSteps() {
				if waitsForPerson(full.GetTask(), st) {
					d.Steps = append(d.Steps, s.stepWaiting(full.GetTask(), st))
				}
			}
		}
		if page = resp.GetNextPageToken(); page == "" {
			break
		}
	}
	slices.SortStableFunc(d.Steps, func(a, b waitingStep) int { return a.CompleteBy.Compare(b.CompleteBy) })
	return true
}

type completeData struct {
	pageData
	W        waitingStep
	Input    string
	Outputs  []namedJSON // outputs of the steps it depends on
	Output   string      // the approve form's output
	Code     string      // the reject form's code
	Message  string      // the reject form's message
	Error    string      // why the last post was refused
	Attempt  int32
	Approver bool
}

type namedJSON struct{ Name, JSON string }

// completePage shows one waiting step with the task's input and the
// outputs of the steps before it, and the approve and reject forms.
func (s *Server) completePage(w http.ResponseWriter, r *http.Request, ss *session) {
	t, archived, ok := s.getTask(w, r, ss)
	if !ok {
		return
	}
	name := r.URL.Query().Get("step")
	st := taskstate.FindStep(t, name)
	switch {
	case st == nil:
		s.renderError(w, r, ss, http.StatusNotFound, "No such step", fmt.Sprintf("step: task %s has no step %q", t.GetId(), name))
		return
	case archived || !taskstate.Awaiting(t, st):
		s.renderError(w, r, ss, http.StatusConflict, "Not waiting", fmt.Sprintf("Step %q of task %s is %s: it does not wait for a completion.", name, t.GetId(), shortEnum(st.GetState())))
		return
	}
	d := s.completeData(r, ss, t, st)
	if !d.Approver {
		s.renderError(w, r, ss, http.StatusForbidden, "Not allowed", "Your identity may not complete steps in namespace "+t.GetNamespace()+" (the admin or approver role).")
		return
	}
	s.render(w, r, http.StatusOK, "complete", d)
}

func (s *Server) completeData(r *http.Request, ss *session, t *reevev1.Task, st *reevev1.Step) completeData {
	d := completeData{pageData: s.page(r, ss, "Complete "+st.GetName(), "waiting", t.GetNamespace()), W: s.stepWaiting(t, st),
		Output: defaultApproval, Code: "rejected", Attempt: st.GetAttempt()}
	d.Approver = s.mayApprove(r.Context(), ss, t.GetNamespace())
	if t.GetInput() != nil {
		d.Input = prettyJSON(t.GetInput())
	}
	spec := taskstate.Spec(t, st.GetName())
	for _, dep := range spec.GetDependsOn() {
		if ds := taskstate.FindStep(t, dep); ds.GetOutput() != nil {
			d.Outputs = append(d.Outputs, namedJSON{dep, prettyJSON(ds.GetOutput())})
		}
	}
	return d
}

// completeStep approves (outcome=approve, output: JSON) or rejects
// (outcome=reject, code, message) the step named by the form, through
// CompleteStep by name, then shows the task. The form carries the attempt
// it was shown for: a step whose attempt changed since (it expired and
// waits again) is not completed on the strength of the old page.
func (s *Server) completeStep(w http.ResponseWriter, r *http.Request, ss *session) {
	ns, id, name := workflow.Namespace(r.PostFormValue("ns")), r.PathValue("id"), r.PostFormValue("step")
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	if !s.mayApprove(r.Context(), ss, ns) {
		s.renderError(w, r, ss, http.StatusForbidden, "Not allowed", "Your identity may not complete steps in namespace "+ns+" (the admin or approver role).")
		return
	}
	req := &reevev1.CompleteStepRequest{Namespace: ns, TaskId: id, Step: name}
	var formErr string
	switch outcome := r.PostFormValue("outcome"); outcome {
	case "approve":
		raw := strings.TrimSpace(r.PostFormValue("output"))
		if raw == "" {
			raw = "null"
		}
		v := &structpb.Value{}
		if err := protojson.Unmarshal([]byte(raw), v); err != nil {
			formErr = "output: not JSON: " + err.Error()
			break
		}
		req.Outcome = &reevev1.CompleteStepRequest_Output{Output: v}
	case "reject":
		code := strings.TrimSpace(r.PostFormValue("code"))
		if code == "" {
			formErr = "code: required: the code of the decision (e.g. rejected)"
			break
		}
		req.Outcome = &reevev1.CompleteStepRequest_Error{Error: &reevev1.CompletionError{Code: code, Message: strings.TrimSpace(r.PostFormValue("message"))}}
	default:
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", fmt.Sprintf("outcome: want approve or reject, got %q", outcome))
		return
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: ns, TaskId: id}, opts...)
	if err != nil {
		s.apiError(w, r, ss, fmt.Sprintf("task %q", id), err)
		return
	}
	t := resp.GetTask()
	st := taskstate.FindStep(t, name)
	if st == nil {
		s.renderError(w, r, ss, http.StatusNotFound, "No such step", fmt.Sprintf("step: task %s has no step %q", id, name))
		return
	}
	attempt, _ := strconv.Atoi(r.PostFormValue("attempt"))
	// A repeat of a completion already recorded (a reload, a double click)
	// is answered by the API as the first was: send it. Anything else must
	// be for the attempt the page showed, still waiting.
	repeat := len(st.GetCompletionDigest()) > 0 && int(st.GetCompletionAttempt()) == attempt
	if !repeat && formErr == "" && (int(st.GetAttempt()) != attempt || !taskstate.Awaiting(t, st)) {
		formErr = fmt.Sprintf("step %q is no longer the attempt %d this page showed waiting: it is at attempt %d (%s). Look again before deciding.", name, attempt, st.GetAttempt(), shortEnum(st.GetState()))
	}
	if formErr == "" {
		_, err = s.sched.CompleteStep(ctx, req, opts...)
		if err == nil {
			s.log.InfoContext(ctx, "console: step completed", "namespace", ns, "task_id", id, "step", name, "outcome", r.PostFormValue("outcome"))
			http.Redirect(w, r, "/tasks/"+url.PathEscape(id)+"?ns="+url.QueryEscape(ns), http.StatusSeeOther)
			return
		}
		if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
			s.apiError(w, r, ss, fmt.Sprintf("complete step %q of task %q", name, id), err)
			return
		}
		formErr = status.Convert(err).Message()
	}
	// Refused: the form again, with what was typed and why.
	if !taskstate.Awaiting(t, st) {
		s.renderError(w, r, ss, http.StatusConflict, "Not possible now", fmt.Sprintf("complete step %q of task %q: %s", name, id, formErr))
		return
	}
	d := s.completeData(r, ss, t, st)
	d.Output, d.Code, d.Message, d.Error = r.PostFormValue("output"), r.PostFormValue("code"), r.PostFormValue("message"), formErr
	s.render(w, r, http.StatusBadRequest, "complete", d)
}

package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// historyPageSize is how many history events the task page shows at once.
const historyPageSize = 50

// historyFilter is the task page's history view: kind family, step,
// failures only, page.
type historyFilter struct {
	Kind     string // "", "task", "step", "compensation"
	Step     string
	Failures bool
	Page     int // 1-based
}

func parseHistoryFilter(q url.Values) (historyFilter, error) {
	h := historyFilter{Kind: q.Get("kind"), Step: q.Get("step"), Failures: q.Get("failures") != "", Page: 1}
	switch h.Kind {
	case "", "task", "step", "compensation":
	default:
		return h, fmt.Errorf("kind: want task, step or compensation, got %q", h.Kind)
	}
	if v := q.Get("hp"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return h, fmt.Errorf("hp: want a page number from 1, got %q", v)
		}
		h.Page = n
	}
	return h, nil
}

func (h historyFilter) keep(e *reevev1.HistoryEvent) bool {
	if h.Kind != "" && !strings.HasPrefix(e.GetKind(), h.Kind+".") {
		return false
	}
	if h.Step != "" && e.GetStep() != h.Step {
		return false
	}
	return !h.Failures || isFailure(e)
}

type stepView struct {
	*reevev1.Step
	// Type and Attempt are those of the step's latest execution: its
	// compensation's once that started (taskstate.Shown).
	Type      string
	Attempt   int32
	StateName string
	Deadline  string
	Overdue   bool
	Output    string
	Retryable bool
	// Disconnected: the step is dispatched to an agent that is not
	// connected to any scheduler (not in ListAgents).
	Disconnected bool
	// Unserved: the step is queued for a type no connected agent serves
	// ("no agent serves T; agents serve ..."); "" otherwise.
	Unserved string
	// Kind says what runs a step without an agent type ("waitFor:
	// external", "sleep 30m"), shown for its type.
	Kind string
}

type eventView struct {
	*reevev1.HistoryEvent
	Failure bool
}

type taskData struct {
	pageData
	T          *reevev1.Task
	State      string
	Terminal   bool
	Archived   bool // read from the archive of finished tasks: read-only
	Duration   string
	Age        string
	Steps      []stepView
	Timeline   template.HTML
	DAG        template.HTML
	Story      []eventView
	Input      string
	Events     []eventView
	EventTotal int
	H          historyFilter
	HPages     int
	StepNames  []string
	Query      string // the page's own query (namespace and history view)
	QueryNoHP  string
	CanCompen  bool
	Version    string // the task's version shown (see sseID)
	// Waits says what the task waits for (waits.go); Held: a queued step
	// is held back by flow control, which changes without a write of the
	// task, so the page looks again every 5 s.
	Waits []waitLine
	Held  bool
	// StartsAt: the task waits to start (Task.start_time), at this time.
	StartsAt string
}

func (s *Server) taskPage(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderTask(w, r, ss, "task")
}

func (s *Server) taskBody(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderTask(w, r, ss, "task-body")
}

// getTask reads the task of the request's path and namespace. archived: it
// came from the archive of finished tasks (read-only).
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, ss *session) (t *reevev1.Task, archived, ok bool) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	id := r.PathValue("id")
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return nil, false, false
	}
	if err := workflow.ValidateTaskID("task id", id); err != nil {
		s.renderError(w, r, ss, http.StatusNotFound, "No such task", err.Error())
		return nil, false, false
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: ns, TaskId: id}, opts...)
	if err != nil {
		s.apiError(w, r, ss, fmt.Sprintf("task %q in namespace %q", id, ns), err)
		return nil, false, false
	}
	return resp.GetTask(), resp.GetArchived(), true
}

func (s *Server) renderTask(w http.ResponseWriter, r *http.Request, ss *session, tmpl string) {
	h, err := parseHistoryFilter(r.URL.Query())
	if err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	t, archived, ok := s.getTask(w, r, ss)
	if !ok {
		return
	}
	d := s.taskData(r, ss, t, archived, h)
	s.render(w, r, http.StatusOK, tmpl, d)
}

func (s *Server) taskData(r *http.Request, ss *session, t *reevev1.Task, archived bool, h historyFilter) taskData {
	now := s.now()
	d := taskData{pageData: s.page(r, ss, "Task "+t.GetId(), "tasks", t.GetNamespace()), T: t, State: shortEnum(t.GetState()),
		Terminal: taskstate.TerminalTask(t.GetState()), Archived: archived, Age: ago(now, t.GetCreateTime()), H: h}
	end := now
	if t.GetEndTime() != nil {
		end = t.GetEndTime().AsTime()
	}
	d.Duration = fmtDur(end.Sub(t.GetCreateTime().AsTime()))
	d.Version = sseID(t)
	// Operator actions take a task that is not over, or a FAILED one (which
	// they resume or undo), but not an archived one: it is read-only, and
	// the scheduler refuses them (a FAILED task moves there after the
	// retention).
	actionable := !archived && (!d.Terminal || t.GetState() == reevev1.TaskState_TASK_STATE_FAILED)
	// A task canceled without undoing can still be undone (compensate).
	d.CanCompen = actionable || (!archived && t.GetState() == reevev1.TaskState_TASK_STATE_CANCELED && taskstate.LeftToUndo(t))
	var agents *namespaceAgents
	if slices.ContainsFunc(t.GetSteps(), func(st *reevev1.Step) bool { return taskstate.Dispatched(st) || taskstate.Queued(st) }) {
		agents = s.namespaceAgents(r, ss, t.GetNamespace())
	}
	for _, st := range t.GetSteps() {
		// RetryStep without a fence takes a FAILED step of a task that is
		// not over, or of a FAILED task (which it resumes).
		failed := st.GetState() == reevev1.StepState_STEP_STATE_FAILED
		v := stepView{Step: st, StateName: shortEnum(st.GetState()), Retryable: failed && actionable}
		v.Type, v.Attempt = taskstate.Shown(t, st)
		if at, ok := taskstate.Deadline(st); ok && !d.Terminal && (taskstate.Dispatched(st) || !t.GetPaused()) {
			dd := at.Sub(now)
			v.Overdue = dd < 0
			if v.Overdue {
				v.Deadline = "overdue " + fmtDur(dd)
			} else {
				v.Deadline = "in " + fmtDur(dd)
			}
		}
		if st.GetOutput() != nil {
			v.Output = prettyJSON(st.GetOutput())
		}
		v.Kind = stepKind(t, st)
		if v.Kind != "" && v.Type == "" {
			v.Type = v.Kind
		}
		d.Held = d.Held || st.GetWaitReason() != ""
		v.Disconnected = agents.disconnected(st)
		v.Unserved = agents.unserved(t, st)
		d.Steps = append(d.Steps, v)
		d.StepNames = append(d.StepNames, st.GetName())
	}
	d.Waits = s.taskWaits(r, ss, t, archived, now)
	if at, ok := taskstate.AwaitingStart(t); ok {
		d.StartsAt = at.UTC().Format("2006-01-02 15:04:05") + " (in " + fmtDur(at.Sub(now)) + ")"
	}
	if t.GetInput() != nil {
		d.Input = prettyJSON(t.GetInput())
	}
	spans, markers := timeline(t, now)
	t0 := t.GetCreateTime().AsTime()
	d.Timeline = timelineSVG(spans, markers, t0, end)
	states := map[string]reevev1.StepState{}
	for _, st := range t.GetSteps() {
		states[st.GetName()] = st.GetState()
	}
	d.DAG = dagSVG(t.GetWorkflow(), states)
	var kept []eventView
	for _, e := range t.GetHistory() {
		if inStory(e) {
			d.Story = append(d.Story, eventView{HistoryEvent: e, Failure: isFailure(e)})
		}
		if h.keep(e) {
			kept = append(kept, eventView{HistoryEvent: e, Failure: isFailure(e)})
		}
	}
	d.EventTotal = len(kept)
	d.HPages = max(1, (len(kept)+historyPageSize-1)/historyPageSize)
	if h.Page > d.HPages {
		d.H.Page = d.HPages
	}
	lo := (d.H.Page - 1) * historyPageSize
	d.Events = kept[lo:min(len(kept), lo+historyPageSize)]
	q := url.Values{"ns": {t.GetNamespace()}}
	if h.Kind != "" {
		q.Set("kind", h.Kind)
	}
	if h.Step != "" {
		q.Set("step", h.Step)
	}
	if h.Failures {
		q.Set("failures", "1")
	}
	d.QueryNoHP = q.Encode()
	if d.H.Page > 1 {
		q.Set("hp", strconv.Itoa(d.H.Page))
	}
	d.Query = q.Encode()
	slices.Sort(d.StepNames)
	return d
}

// taskJSON exports the task as the API returns it (protojson), as a download.
func (s *Server) taskJSON(w http.ResponseWriter, r *http.Request, ss *session) {
	t, _, ok := s.getTask(w, r, ss)
	if !ok {
		return
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(t)
	if err != nil {
		s.renderError(w, r, ss, http.StatusInternalServerError, "Export failed", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "task-"+t.GetId()+".json"))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// sseID is the Last-Event-ID of a task version: its update time.
func sseID(t *reevev1.Task) string {
	return strconv.FormatInt(t.GetUpdateTime().AsTime().UnixNano(), 10)
}

// inStory reports whether e belongs in the task page's "What happened"
// list: decisions, failures, what compensation undid, and how it ended.
func inStory(e *reevev1.HistoryEvent) bool {
	switch e.GetKind() {
	case "step.failed", "compensation.failed", "compensation.succeeded", "task.compensated", "task.succeeded":
		return true
	}
	return isDecision(e)
}

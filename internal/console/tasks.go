package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// taskFilter is the tasks page's URL: namespace, filters and page. Its
// fields keep what the user typed, so a form shows it back.
type taskFilter struct {
	NS       string
	State    string
	Workflow string
	Prefix   string
	Label    string // "key=value[,key=value...]"
	After    string
	Before   string
	Page     string // opaque page token
	PageNo   int    // 1-based, for display
	Size     int

	state         reevev1.TaskState
	after, before time.Time
	labels        map[string]string
}

// parseTaskFilter reads the filters of the tasks page; a malformed one is an
// error naming it.
func parseTaskFilter(q url.Values) (taskFilter, error) {
	f := taskFilter{NS: workflow.Namespace(q.Get("ns")), State: q.Get("state"), Workflow: strings.TrimSpace(q.Get("workflow")),
		Prefix: strings.TrimSpace(q.Get("prefix")), Label: strings.TrimSpace(q.Get("label")), After: strings.TrimSpace(q.Get("after")), Before: strings.TrimSpace(q.Get("before")),
		Page: q.Get("page"), PageNo: 1, Size: defaultPageSize}
	if err := workflow.ValidateNamespace("ns", f.NS); err != nil {
		return f, err
	}
	if f.State != "" {
		v, ok := reevev1.TaskState_value["TASK_STATE_"+strings.ToUpper(f.State)]
		if !ok || v == 0 {
			return f, fmt.Errorf("state: unknown task state %q (want pending, running, succeeded, failed, compensating, compensated or canceled)", f.State)
		}
		f.state = reevev1.TaskState(v)
	}
	if f.Workflow != "" {
		if err := workflow.ValidateName("workflow", f.Workflow); err != nil {
			return f, err
		}
	}
	if f.Prefix != "" && len(f.Prefix) > 128 {
		return f, fmt.Errorf("prefix: at most 128 characters")
	}
	if f.Label != "" {
		f.labels = map[string]string{}
		for _, kv := range strings.Split(f.Label, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return f, fmt.Errorf("label: want key=value (several separated by commas), got %q", kv)
			}
			f.labels[k] = v
		}
		if err := workflow.ValidateLabels("label", f.labels); err != nil {
			return f, err
		}
	}
	var err error
	if f.after, err = parseWhen("after", f.After); err != nil {
		return f, err
	}
	if f.before, err = parseWhen("before", f.Before); err != nil {
		return f, err
	}
	if !f.after.IsZero() && !f.before.IsZero() && !f.after.Before(f.before) {
		return f, fmt.Errorf("after: must be before %q", f.Before)
	}
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return f, fmt.Errorf("size: want a number from 1 to %d, got %q", maxPageSize, v)
		}
		f.Size = n
	}
	if v := q.Get("p"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, fmt.Errorf("p: want a page number from 1, got %q", v)
		}
		f.PageNo = n
	}
	return f, nil
}

// parseWhen accepts RFC 3339 times, dates (2026-11-23, UTC), and the
// datetime-local form of browsers (2026-11-23T10:00, UTC).
func parseWhen(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: want a time like 2026-11-23T10:00:00Z or a date like 2026-11-23, got %q", field, v)
}

// query returns the URL query of f, with page fields replaced.
func (f taskFilter) query(page string, pageNo int) string {
	q := url.Values{}
	q.Set("ns", f.NS)
	for k, v := range map[string]string{"state": f.State, "workflow": f.Workflow, "prefix": f.Prefix, "label": f.Label, "after": f.After, "before": f.Before, "page": page} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if pageNo > 1 {
		q.Set("p", strconv.Itoa(pageNo))
	}
	if f.Size != defaultPageSize {
		q.Set("size", strconv.Itoa(f.Size))
	}
	return q.Encode()
}

// Query is the URL query of the current page.
func (f taskFilter) Query() string { return f.query(f.Page, f.PageNo) }

// FilterQuery is the URL query of the filter's first page.
func (f taskFilter) FilterQuery() string { return f.query("", 1) }

// WithState is the first page of the filter with another state.
func (f taskFilter) WithState(s string) string { g := f; g.State = s; return g.query("", 1) }

// taskRow is one line of the tasks list.
type taskRow struct {
	ID, NS, Workflow, State string
	Step                    string
	Attempt                 int32
	Age                     string
	Deadline                string
	Overdue                 bool
	Terminal                bool
	Archived                bool // read from the archive of finished tasks: read-only
}

func (s *Server) row(t *reevev1.Task, now time.Time, archived bool) taskRow {
	r := taskRow{ID: t.GetId(), NS: t.GetNamespace(), Workflow: t.GetWorkflow().GetName(), State: shortEnum(t.GetState()),
		Age: fmtDur(now.Sub(t.GetCreateTime().AsTime())), Terminal: taskstate.TerminalTask(t.GetState()), Archived: archived}
	if st := currentStep(t); st != nil {
		r.Step, r.Attempt = st.GetName(), st.GetAttempt()
		if r.Step != "" && st.GetCompensation() {
			r.Step = "↺ " + r.Step
		}
		if at, ok := taskstate.Deadline(st); ok && !r.Terminal && (taskstate.Dispatched(st) || !t.GetPaused()) {
			d := at.Sub(now)
			r.Overdue = d < 0
			if r.Overdue {
				r.Deadline = "overdue " + fmtDur(d)
			} else {
				r.Deadline = "in " + fmtDur(d)
			}
		}
	}
	return r
}

// currentStep is the step a person looks at first: one that is running (or
// compensating), else one queued, else one that failed.
func currentStep(t *reevev1.Task) *reevev1.Step {
	var queued, failed *reevev1.Step
	for _, st := range t.GetSteps() {
		switch {
		case st.GetState() == reevev1.StepState_STEP_STATE_RUNNING, st.GetState() == reevev1.StepState_STEP_STATE_COMPENSATING:
			return st
		case queued == nil && taskstate.Queued(st):
			queued = st
		case failed == nil && st.GetState() == reevev1.StepState_STEP_STATE_FAILED:
			failed = st
		}
	}
	if queued != nil {
		return queued
	}
	return failed
}

type tasksData struct {
	pageData
	F        taskFilter
	Rows     []taskRow
	Next     string
	Counts   []stateCount
	States   []string
	Error    string
	Rev      int64  // etcd revision the page was read at
	FP       string // fingerprint of the rows (the polling fallback)
	MaxBulk  int
	FullPage bool
}

type stateCount struct {
	State string
	N     int64
}

var taskStates = []string{"pending", "running", "succeeded", "failed", "compensating", "compensated", "canceled"}

func (s *Server) tasksPage(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderTasks(w, r, ss, "tasks")
}

func (s *Server) tasksRows(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderTasks(w, r, ss, "tasks-body")
}

func (s *Server) renderTasks(w http.ResponseWriter, r *http.Request, ss *session, tmpl string) {
	f, err := parseTaskFilter(r.URL.Query())
	d := tasksData{F: f, States: taskStates, MaxBulk: maxBulk}
	if err != nil {
		d.pageData = s.page(r, ss, "Tasks", "tasks", workflow.Namespace(r.URL.Query().Get("ns")))
		d.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, tmpl, d)
		return
	}
	d.pageData = s.page(r, ss, "Tasks", "tasks", f.NS)
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	p, err := s.listTasks(ctx, opts, f, f.Size, f.Page)
	if err != nil {
		s.apiError(w, r, ss, "list tasks", err)
		return
	}
	d.Rev, d.FP = p.Revision, fingerprint(p.Tasks)
	if len(p.Tasks) == 0 && f.FilterQuery() == "ns="+url.QueryEscape(f.NS) && !s.namespaceKnown(r, ss, f.NS) {
		s.renderError(w, r, ss, http.StatusNotFound, "Unknown namespace", fmt.Sprintf("Namespace %q has no task and no workflow. A namespace exists through its tasks and workflows: check its name.", f.NS))
		return
	}
	now := s.now()
	for _, t := range p.Tasks {
		d.Rows = append(d.Rows, s.row(t, now, p.Archived[t.GetId()]))
	}
	d.Next = p.Next
	s.render(w, r, http.StatusOK, tmpl, d)
}

// tasksCounts renders the counts per state of the tasks page: a request of
// its own, so that counting a large namespace never delays the list.
func (s *Server) tasksCounts(w http.ResponseWriter, r *http.Request, ss *session) {
	f, err := parseTaskFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	s.render(w, r, http.StatusOK, "tasks-counts", tasksData{F: f, Counts: s.counts(ctx, opts, f)})
}

// namespaceKnown reports whether ns has a workflow (asked when it has no
// task); "default" always exists. An error counts as known: the list page
// then shows its empty list rather than a wrong 404.
func (s *Server) namespaceKnown(r *http.Request, ss *session, ns string) bool {
	if ns == workflow.DefaultNamespace {
		return true
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{Namespace: ns, PageSize: 1}, opts...)
	return err != nil || len(resp.GetWorkflows()) > 0
}

// timeOf is a timestamp or nil for the zero time.
func timeOf(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// NextQuery is the URL query of the page after this one.
func (f taskFilter) NextQuery(token string) string { return f.query(token, f.PageNo+1) }

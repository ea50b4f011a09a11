package console

import (
	"net/http"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// overviewSample bounds the active tasks the overview reads (one page of
// RUNNING and one of COMPENSATING tasks).
const overviewSample = 1000

type overdueStep struct {
	TaskID, Step, Agent string
	Attempt             int32
	Overdue             string
}

type overviewData struct {
	pageData
	Counts       []stateCount
	Running      int
	Overdue      int
	Queued       int
	Oldest       *overdueStep
	Sampled      bool // more active tasks than overviewSample
	Supervisor   string
	SupervisorAt string
	OpenAlerts   int
	AlertsKnown  bool
	Recent       []taskRow
	Submitted    int  // tasks created in the last throughputWindow
	SubmittedMax bool // at least overviewSample
	Window       string
}

// throughputWindow is the period the overview's throughput covers.
const throughputWindow = 5 * time.Minute

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderOverview(w, r, ss, "overview")
}

func (s *Server) overviewBody(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderOverview(w, r, ss, "overview-body")
}

// renderOverview gathers the overview from the API: counts per state, the
// running, queued and overdue steps of the active tasks, the supervisor last
// seen acting, open alerts and the newest tasks.
func (s *Server) renderOverview(w http.ResponseWriter, r *http.Request, ss *session, tmpl string) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := overviewData{pageData: s.page(r, ss, "Overview", "overview", ns)}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	now := s.now()
	var lastSup, oldestAt time.Time
	for _, st := range []reevev1.TaskState{reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING} {
		resp, err := s.sched.ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: ns, State: st, PageSize: overviewSample}, opts...)
		if err != nil {
			s.apiError(w, r, ss, "list tasks", err)
			return
		}
		d.Sampled = d.Sampled || resp.GetNextPageToken() != ""
		for _, t := range resp.GetTasks() {
			for _, step := range t.GetSteps() {
				switch {
				case taskstate.Dispatched(step):
					d.Running++
					if at, ok := taskstate.Deadline(step); ok && at.Before(now) {
						d.Overdue++
						if d.Oldest == nil || at.Before(oldestAt) {
							oldestAt = at
							d.Oldest = &overdueStep{TaskID: t.GetId(), Step: step.GetName(), Agent: step.GetLockedByAgent(), Attempt: step.GetAttempt(), Overdue: "overdue " + fmtDur(now.Sub(at))}
						}
					}
				case taskstate.Queued(step):
					d.Queued++
				}
			}
			for _, e := range t.GetHistory() {
				if strings.HasPrefix(e.GetActor(), "supervisor/") && e.GetTime().AsTime().After(lastSup) {
					lastSup, d.Supervisor = e.GetTime().AsTime(), e.GetActor()
				}
			}
		}
	}
	if !lastSup.IsZero() {
		d.SupervisorAt = fmtDur(now.Sub(lastSup)) + " ago"
	}
	d.Counts = s.counts(ctx, opts, taskFilter{NS: ns})
	if d.Operator {
		if resp, err := s.sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: ns, PageSize: 1000}, opts...); err == nil {
			d.OpenAlerts, d.AlertsKnown = len(resp.GetAlerts()), true
		}
	}
	d.Window = fmtDur(throughputWindow)
	if resp, err := s.sched.ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: ns, CreatedAfter: timeOf(now.Add(-throughputWindow)), PageSize: overviewSample, View: reevev1.TaskView_TASK_VIEW_BASIC}, opts...); err == nil {
		d.Submitted, d.SubmittedMax = len(resp.GetTasks()), resp.GetNextPageToken() != ""
	}
	if p, err := s.listTasks(ctx, opts, taskFilter{NS: ns}, 10, ""); err == nil {
		for _, t := range p.Tasks {
			d.Recent = append(d.Recent, s.row(t, now, p.Archived[t.GetId()]))
		}
	}
	s.render(w, r, http.StatusOK, tmpl, d)
}

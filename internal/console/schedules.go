package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The schedules pages (docs/schedules.md): the namespace's schedules with
// their next times, one schedule's next 5 times, recent runs with their
// tasks' states and skipped times, and, for an operator (the namespace's
// admin), pause, resume and trigger.

type schedulesData struct {
	pageData
	Schedules []*reevev1.Schedule
	Next      string
}

func (s *Server) schedulesPage(w http.ResponseWriter, r *http.Request, ss *session) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := schedulesData{pageData: s.page(r, ss, "Schedules", "schedules", ns)}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.schedules.ListSchedules(ctx, &reevev1.ListSchedulesRequest{Namespace: ns, PageSize: 200, PageToken: r.URL.Query().Get("page")}, opts...)
	if err != nil {
		s.apiError(w, r, ss, "list schedules", err)
		return
	}
	d.Schedules, d.Next = resp.GetSchedules(), resp.GetNextPageToken()
	s.render(w, r, http.StatusOK, "schedules", d)
}

type scheduleData struct {
	pageData
	S *reevev1.Schedule
	// Message says what the last action did (a trigger's task or why it
	// did not start), from the redirect's query.
	Message string
}

func (s *Server) schedulePage(w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	ns, name := workflow.Namespace(q.Get("ns")), r.PathValue("name")
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.schedules.GetSchedule(ctx, &reevev1.GetScheduleRequest{Namespace: ns, Name: name}, opts...)
	if err != nil {
		s.apiError(w, r, ss, "schedule "+strconv.Quote(name)+" in namespace "+strconv.Quote(ns), err)
		return
	}
	d := scheduleData{pageData: s.page(r, ss, "Schedule "+name, "schedules", ns), S: resp.GetSchedule(), Message: q.Get("msg")}
	s.render(w, r, http.StatusOK, "schedule", d)
}

// scheduleAction applies pause, resume or trigger, then shows the
// schedule again.
func (s *Server) scheduleAction(w http.ResponseWriter, r *http.Request, ss *session) {
	ns, name, action := workflow.Namespace(r.PostFormValue("ns")), r.PathValue("name"), r.PathValue("action")
	if !s.requireOperator(w, r, ss, ns) {
		return
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	var (
		msg string
		err error
	)
	switch action {
	case "pause":
		note := strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			note = "paused from the console"
		}
		_, err = s.schedules.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Namespace: ns, Name: name, Note: note}, opts...)
		msg = "Paused."
	case "resume":
		_, err = s.schedules.ResumeSchedule(ctx, &reevev1.ResumeScheduleRequest{Namespace: ns, Name: name, Note: "resumed from the console"}, opts...)
		msg = "Resumed: it fires from the next time."
	case "trigger":
		var resp *reevev1.TriggerScheduleResponse
		resp, err = s.schedules.TriggerSchedule(ctx, &reevev1.TriggerScheduleRequest{Namespace: ns, Name: name}, opts...)
		if msg = "Started task " + resp.GetTask().GetId() + "."; resp.GetTask() == nil {
			msg = "Not started: " + resp.GetSkipped()
		}
	default:
		s.renderError(w, r, ss, http.StatusNotFound, "Not found", "There is no schedule action "+strconv.Quote(action)+" (pause, resume, trigger).")
		return
	}
	if err != nil {
		s.apiError(w, r, ss, action+" schedule "+strconv.Quote(name), err)
		return
	}
	http.Redirect(w, r, "/schedules/"+url.PathEscape(name)+"?ns="+url.QueryEscape(ns)+"&msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

// specText says when a schedule fires, in words.
func specText(sp *reevev1.ScheduleSpec) string {
	var b strings.Builder
	if sp.GetCron() != "" {
		b.WriteString("cron " + sp.GetCron())
		if sp.GetTimeZone() != "" {
			b.WriteString(" (" + sp.GetTimeZone() + ")")
		} else {
			b.WriteString(" (UTC)")
		}
	} else {
		b.WriteString("every " + fmtDur(sp.GetEvery().AsDuration()))
		if o := sp.GetOffset().AsDuration(); o != 0 {
			b.WriteString(" + " + fmtDur(o))
		}
	}
	if j := sp.GetJitter().AsDuration(); j != 0 {
		b.WriteString(", jitter up to " + fmtDur(j))
	}
	return b.String()
}

// policiesText says a schedule's policies in words: overlap (as the CLI
// spells it), catch-up window, run limit.
func policiesText(sc *reevev1.Schedule) string {
	overlap := "skip"
	if p := sc.GetPolicies().GetOverlap(); p != reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_UNSPECIFIED {
		overlap = strings.ToLower(strings.TrimPrefix(p.String(), "SCHEDULE_OVERLAP_POLICY_"))
	}
	window := "1m"
	if w := sc.GetPolicies().GetCatchupWindow(); w != nil {
		window = fmtDur(w.AsDuration())
	}
	limit := "no run limit"
	if sc.RemainingRuns != nil {
		limit = strconv.FormatInt(sc.GetRemainingRuns().GetValue(), 10) + " runs remain"
	}
	return "overlap " + overlap + " · catch-up window " + window + " · " + limit
}

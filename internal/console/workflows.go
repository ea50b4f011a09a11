package console

import (
	"html/template"
	"net/http"
	"strconv"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

type workflowsData struct {
	pageData
	Workflows []*reevev1.Workflow
	Next      string
}

func (s *Server) workflowsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := workflowsData{pageData: s.page(r, ss, "Workflows", "workflows", ns)}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{Namespace: ns, PageSize: 200, PageToken: r.URL.Query().Get("page")}, opts...)
	if err != nil {
		s.apiError(w, r, ss, "list workflows", err)
		return
	}
	d.Workflows, d.Next = resp.GetWorkflows(), resp.GetNextPageToken()
	s.render(w, r, http.StatusOK, "workflows", d)
}

type stepPolicy struct {
	Spec         *reevev1.StepSpec
	Timeout      string
	Attempts     int32
	Backoff      string
	Escalation   string
	Compensation string
	ScheduleTo   string
}

type workflowData struct {
	pageData
	W        *reevev1.Workflow
	Versions []int32
	DAG      template.HTML
	Steps    []stepPolicy
}

func (s *Server) workflowPage(w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	ns := workflow.Namespace(q.Get("ns"))
	name := r.PathValue("name")
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	var version int
	if v := q.Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", "version: want a version number from 1, got "+strconv.Quote(v))
			return
		}
		version = n
	}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.sched.GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Namespace: ns, Name: name, Version: int32(version)}, opts...)
	if err != nil {
		s.apiError(w, r, ss, "workflow "+strconv.Quote(name)+" in namespace "+strconv.Quote(ns), err)
		return
	}
	wf := resp.GetWorkflow()
	d := workflowData{pageData: s.page(r, ss, "Workflow "+wf.GetName(), "workflows", ns), W: wf, DAG: dagSVG(wf, nil)}
	latest := wf.GetVersion()
	if version != 0 {
		if l, err := s.sched.GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Namespace: ns, Name: name}, opts...); err == nil {
			latest = l.GetWorkflow().GetVersion()
		}
	}
	for v := latest; v >= 1 && len(d.Versions) < 50; v-- {
		d.Versions = append(d.Versions, v)
	}
	for _, sp := range wf.GetSteps() {
		p := workflow.EffectiveRetryPolicy(wf, sp)
		pol := stepPolicy{Spec: sp, Timeout: fmtDur(workflow.EffectiveTimeout(wf, sp)), Attempts: p.GetMaxAttempts(),
			Backoff:    fmtDur(p.GetInitialBackoff().AsDuration()) + " … " + fmtDur(p.GetMaxBackoff().AsDuration()),
			Escalation: shortEnum(workflow.EffectiveEscalation(wf, sp))}
		if sp.GetEscalation() == reevev1.Escalation_ESCALATION_UNSPECIFIED {
			// Compensate when the workflow declares a compensation, else fail.
			pol.Escalation += " (default)"
		}
		if sp.GetCompensation() != nil {
			pol.Compensation = sp.GetCompensation().GetType()
		}
		if d := workflow.EffectiveScheduleToStart(wf, sp); d > 0 {
			pol.ScheduleTo = fmtDur(d)
		} else {
			pol.ScheduleTo = "no limit"
		}
		d.Steps = append(d.Steps, pol)
	}
	s.render(w, r, http.StatusOK, "workflow", d)
}

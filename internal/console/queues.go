package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The queues page (issue 36): every step type of a namespace with a limit,
// a pause, queued steps or a connected agent (QueueService.ListQueues), and,
// for the namespace's admin, pause, resume and the limit form
// (SetQueueLimit).

type queuesData struct {
	pageData
	Queues  []*reevev1.Queue
	Message string // what the last action did, from the redirect's query
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	ns := workflow.Namespace(q.Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := queuesData{pageData: s.page(r, ss, "Queues", "queues", ns), Message: q.Get("msg")}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	resp, err := s.queues.ListQueues(ctx, &reevev1.ListQueuesRequest{Namespace: ns}, opts...)
	if err != nil {
		s.apiError(w, r, ss, "list queues", err)
		return
	}
	d.Queues = resp.GetQueues()
	s.render(w, r, http.StatusOK, "queues", d)
}

// queueAction pauses, resumes, sets (limit) or clears the limits of a step
// type, then shows the queues again.
func (s *Server) queueAction(w http.ResponseWriter, r *http.Request, ss *session) {
	ns, typ, action := workflow.Namespace(r.PostFormValue("ns")), r.PathValue("type"), r.PathValue("action")
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
		_, err = s.queues.PauseQueue(ctx, &reevev1.PauseQueueRequest{Namespace: ns, Type: typ}, opts...)
		msg = "Paused " + typ + ": nothing of it is dispatched; its steps stay queued."
	case "resume":
		_, err = s.queues.ResumeQueue(ctx, &reevev1.ResumeQueueRequest{Namespace: ns, Type: typ}, opts...)
		msg = "Resumed " + typ + "."
	case "clear":
		_, err = s.queues.SetQueueLimit(ctx, &reevev1.SetQueueLimitRequest{Namespace: ns, Type: typ, Clear: true}, opts...)
		msg = "Cleared the limits of " + typ + "."
	case "limit":
		req := &reevev1.SetQueueLimitRequest{Namespace: ns, Type: typ}
		var bad error
		if req.MaxRunning, bad = formInt(r, "max_running"); bad == nil {
			if req.Burst, bad = formInt(r, "burst"); bad == nil {
				req.Rate, bad = formFloat(r, "rate")
			}
		}
		if bad != nil {
			s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", bad.Error())
			return
		}
		var resp *reevev1.SetQueueLimitResponse
		resp, err = s.queues.SetQueueLimit(ctx, req, opts...)
		msg = "Set the limits of " + typ + ": " + limitText(resp.GetConfig()) + "."
	default:
		s.renderError(w, r, ss, http.StatusNotFound, "Not found", "There is no queue action "+strconv.Quote(action)+" (pause, resume, limit, clear).")
		return
	}
	if err != nil {
		s.apiError(w, r, ss, action+" queue "+strconv.Quote(typ), err)
		return
	}
	s.log.InfoContext(ctx, "console: queue action", "action", action, "namespace", ns, "type", typ)
	http.Redirect(w, r, "/queues?ns="+url.QueryEscape(ns)+"&msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

// formInt reads a whole number form field; empty is 0.
func formInt(r *http.Request, field string) (int32, error) {
	v := strings.TrimSpace(r.PostFormValue(field))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: want a whole number, got %q", field, v)
	}
	return int32(n), nil
}

// formFloat reads a number form field; empty is 0.
func formFloat(r *http.Request, field string) (float64, error) {
	v := strings.TrimSpace(r.PostFormValue(field))
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: want a number, got %q", field, v)
	}
	return f, nil
}

// limitText says a queue's limits in words: "max running 10, 5/s burst 10",
// "no limit".
func limitText(c *reevev1.QueueConfig) string {
	var parts []string
	if n := c.GetMaxRunning(); n > 0 {
		parts = append(parts, "max running "+strconv.Itoa(int(n)))
	}
	if c.GetRate() > 0 {
		parts = append(parts, rateText(c))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

// rateText says a queue's rate and burst: "5/s, burst 10"; "" without a
// rate.
func rateText(c *reevev1.QueueConfig) string {
	if c.GetRate() <= 0 {
		return ""
	}
	return strconv.FormatFloat(c.GetRate(), 'f', -1, 64) + "/s, burst " + strconv.Itoa(int(max(1, c.GetBurst())))
}

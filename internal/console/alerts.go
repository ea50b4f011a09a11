package console

import (
	"context"
	"net/http"
	"net/url"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// maxAlertsShown bounds the alerts page.
const maxAlertsShown = 200

type alertsData struct {
	pageData
	All    bool
	Alerts []*reevev1.Alert
	More   bool
	Error  string
}

func (s *Server) alertsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderAlerts(w, r, ss, "alerts")
}

func (s *Server) alertsRows(w http.ResponseWriter, r *http.Request, ss *session) {
	s.renderAlerts(w, r, ss, "alerts-body")
}

func (s *Server) renderAlerts(w http.ResponseWriter, r *http.Request, ss *session, tmpl string) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := alertsData{pageData: s.page(r, ss, "Alerts", "alerts", ns), All: r.URL.Query().Get("all") != ""}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	// The API lists oldest first; the page shows the newest first.
	var page string
	for {
		resp, err := s.sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: ns, IncludeAcknowledged: d.All, PageSize: 1000, PageToken: page}, opts...)
		if err != nil {
			s.apiError(w, r, ss, "list alerts", err)
			return
		}
		d.Alerts = append(d.Alerts, resp.GetAlerts()...)
		if page = resp.GetNextPageToken(); page == "" || len(d.Alerts) >= 5*maxAlertsShown {
			break
		}
	}
	for i, j := 0, len(d.Alerts)-1; i < j; i, j = i+1, j-1 {
		d.Alerts[i], d.Alerts[j] = d.Alerts[j], d.Alerts[i]
	}
	if len(d.Alerts) > maxAlertsShown {
		d.Alerts, d.More = d.Alerts[:maxAlertsShown], true
	}
	s.render(w, r, http.StatusOK, tmpl, d)
}

// alertsEvents sends "changed" whenever WatchAlerts reports an alert, so the
// page reloads its table; the watch is reopened when it breaks.
func (s *Server) alertsEvents(w http.ResponseWriter, r *http.Request, ss *session) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	out := startSSE(w)
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for ctx.Err() == nil {
		err := s.watchAlerts(ctx, ns, ss, out, tick)
		if ctx.Err() != nil {
			return
		}
		s.log.DebugContext(ctx, "console: alert watch broke", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollEvery):
		}
		// Alerts may have changed while the watch was down.
		if out.send("changed", "", "") != nil {
			return
		}
	}
}

func (s *Server) watchAlerts(ctx context.Context, ns string, ss *session, out *sse, tick *time.Ticker) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.sup.WatchAlerts(wctx, &reevev1.WatchAlertsRequest{Namespace: ns}, ss.callOpts()...)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	go func() {
		for {
			// The stream starts with the open alerts: one harmless reload.
			_, err := stream.Recv()
			if err != nil {
				ch <- err
				return
			}
			select {
			case ch <- nil:
			case <-wctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := out.comment("heartbeat"); err != nil {
				return err
			}
		case err := <-ch:
			if err != nil {
				return err
			}
			if err := out.send("changed", "", ""); err != nil {
				return err
			}
		}
	}
}

// ackAlert acknowledges an alert in the operator's name and goes back to
// the page it came from.
func (s *Server) ackAlert(w http.ResponseWriter, r *http.Request, ss *session) {
	ns := workflow.Namespace(r.PostFormValue("ns"))
	if !s.requireOperator(w, r, ss, ns) {
		return
	}
	id := r.PathValue("id")
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	if _, err := s.sup.AckAlert(ctx, &reevev1.AckAlertRequest{Namespace: ns, AlertId: id, AcknowledgedBy: "console"}, opts...); err != nil {
		s.apiError(w, r, ss, "acknowledge alert "+id, err)
		return
	}
	back := "/alerts?ns=" + url.QueryEscape(ns)
	if r.PostFormValue("all") != "" {
		back += "&all=1"
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// pageData is what the layout needs on every page.
type pageData struct {
	Title    string
	Nav      string // active navigation entry
	NS       string
	CSRF     string
	Operator bool // the identity may use operator actions here
	Known    bool // Operator was asked of the API
	Now      time.Time
	Secure   bool
	ReadOnly bool
}

func (s *Server) page(r *http.Request, ss *session, title, nav, ns string) pageData {
	p := pageData{Title: title, Nav: nav, NS: ns, Secure: s.secure, ReadOnly: s.readOnly, Now: s.now()}
	if ss != nil {
		p.CSRF = ss.csrf
		if ns != "" {
			p.Operator, p.Known = s.mayOperate(r.Context(), ss, ns), true
		}
	}
	return p
}

func parseTemplates() (*template.Template, error) {
	return template.New("").Funcs(template.FuncMap{
		"short":     shortEnum,
		"ts":        fmtTime,
		"ago":       ago,
		"dur":       fmtDur,
		"json":      prettyJSON,
		"hasValue":  func(v *structpb.Value) bool { return v != nil },
		"add":       func(a, b int) int { return a + b },
		"lower":     strings.ToLower,
		"hasPrefix": strings.HasPrefix,
		"served": func(agents []*reevev1.AgentInfo, stepType string) int {
			n := 0
			for _, a := range agents {
				if slices.Contains(a.GetStepTypes(), stepType) {
					n++
				}
			}
			return n
		},
		// errorMessage is a step error's message without the code it may
		// start with (the page shows the code apart).
		"errorMessage": func(e *reevev1.StepError) string {
			if e.GetCode() == "" {
				return e.GetMessage()
			}
			return strings.TrimPrefix(e.GetMessage(), e.GetCode()+": ")
		},
		"explain":  func(kind string) string { return explanations[kind] },
		"list3":    func() []string { return []string{"task", "step", "compensation"} },
		"spec":     specText,
		"in":       func(now time.Time, t *timestamppb.Timestamp) string { return "in " + fmtDur(t.AsTime().Sub(now)) },
		"policies": policiesText,
		"clock":    clockTime,
		"since":    func(now, t time.Time) string { return fmtDur(now.Sub(t)) },
		"rate":     rateText,
		"int64":    func(n int32) int64 { return int64(n) },
	}).ParseFS(files, "templates/*.html")
}

// explanations say in plain words what a history event means, for the task
// page's "What happened".
var explanations = map[string]string{
	"step.failed":                    "the agent reported a failure",
	"step.expired":                   "no result in time: the attempt was taken back",
	"step.schedule_to_start_expired": "no agent took it before its schedule-to-start deadline",
	"step.heartbeat_missed":          "the agent stopped heartbeating",
	"step.retry_scheduled":           "a new attempt is queued",
	"step.escalated":                 "attempts exhausted or a permanent error: the step's escalation policy applies",
	"step.unacknowledged":            "the agent never acknowledged the assignment: queued again",
	"step.agent_disconnected":        "the agent's stream ended while it held the attempt",
	"step.agent_reconnected":         "the agent came back and still holds the attempt",
	"task.rerun":                     "this task runs an earlier one again from a step",
	"task.paused":                    "an operator paused the task: no step is dispatched until it is resumed",
	"task.resumed":                   "an operator resumed the task: its ready steps are dispatched again",
	"step.agent_forgot":              "the agent came back without the attempt: it no longer runs it",
	"step.retried_by_operator":       "an operator retried the failed step",
	"task.compensating":              "undoing the succeeded steps, in reverse order",
	"compensation.succeeded":         "this step is undone",
	"compensation.failed":            "undoing this step failed",
	"task.compensated":               "every succeeded step was undone",
	"task.failed":                    "the task failed and needs a person: an alert is raised",
	"task.canceled":                  "canceled",
	"task.succeeded":                 "every step succeeded",
	"step.waiting":                   "the step waits for a completion from outside (an approval): no agent runs it",
	"step.sleeping":                  "a durable timer: the step succeeds at its time, with no agent",
	"step.deferred":                  "its agent handed it off: it waits for a completion with its token (e.g. a webhook)",
	"task.start_scheduled":           "submitted to start later: no step is dispatched before its start time",
	"task.started":                   "its start time came: its first steps are ready",
	"task.timed_out":                 "the whole task passed its deadline: it escalates as its workflow says",
}

// shortEnum turns TASK_STATE_RUNNING into "running".
func shortEnum(v fmt.Stringer) string {
	s := v.String()
	for _, p := range []string{"TASK_STATE_", "STEP_STATE_", "ESCALATION_"} {
		s = strings.TrimPrefix(s, p)
	}
	return strings.ToLower(s)
}

// clockTime says when t is for a person glancing at a page: "10:02" (UTC)
// on now's day, "Nov 30 10:02" on another day of now's year, else with the
// year.
func clockTime(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	t, now = t.UTC(), now.UTC()
	switch {
	case t.YearDay() == now.YearDay() && t.Year() == now.Year():
		return t.Format("15:04")
	case t.Year() == now.Year():
		return t.Format("Jan 2 15:04")
	}
	return t.Format("2006-01-02 15:04")
}

func fmtTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04:05.000")
}

// fmtDur rounds a duration for people: 1.2s, 3m4s, 2h5m.
func fmtDur(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func ago(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return fmtDur(now.Sub(t.AsTime())) + " ago"
}

func prettyJSON(m proto.Message) string {
	if m == nil {
		return ""
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

// render executes the named template into a buffer first, so that a
// template error becomes a 500 page rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.ErrorContext(r.Context(), "console: render", "template", name, "err", err)
		http.Error(w, "the console failed to render this page; see its log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct {
	pageData
	Heading, Message string
	Code             int
}

func (s *Server) renderError(w http.ResponseWriter, r *http.Request, ss *session, code int, heading, msg string) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	d := errorData{pageData: pageData{Title: heading, NS: ns, Secure: s.secure, ReadOnly: s.readOnly}, Heading: heading, Message: msg, Code: code}
	if ss != nil {
		d.CSRF = ss.csrf
	}
	s.render(w, r, code, "error", d)
}

// apiError shows a failed gRPC call as a page with the matching HTTP status.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, ss *session, what string, err error) {
	st := status.Convert(err)
	code, heading := http.StatusBadGateway, "The scheduler refused"
	switch st.Code() {
	case codes.NotFound:
		code, heading = http.StatusNotFound, "Not found"
	case codes.InvalidArgument, codes.OutOfRange:
		code, heading = http.StatusBadRequest, "Bad request"
	case codes.FailedPrecondition, codes.Aborted:
		code, heading = http.StatusConflict, "Not possible now"
	case codes.PermissionDenied:
		code, heading = http.StatusForbidden, "Not allowed"
	case codes.Unauthenticated:
		code, heading = http.StatusUnauthorized, "Sign in again"
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		code, heading = http.StatusServiceUnavailable, "The scheduler is unavailable"
	}
	s.renderError(w, r, ss, code, heading, what+": "+st.Message())
}

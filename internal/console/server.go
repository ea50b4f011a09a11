package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

//go:embed assets templates
var files embed.FS

// Server serves the console: HTML pages rendered from the scheduler's gRPC
// API, called with each browser session's credentials.
type Server struct {
	sched    reevev1.SchedulerServiceClient
	sup      reevev1.SupervisorServiceClient
	log      *slog.Logger
	secure   bool
	readOnly bool
	now      func() time.Time
	tmpl     *template.Template
	sessions *sessions
	mux      *http.ServeMux
	// callTimeout bounds every unary gRPC call a page makes.
	callTimeout time.Duration
	// once is the one-time sign-in of WithOneTimeSignIn (nil: none).
	once   *oneTimeSignIn
	onceMu sync.Mutex

	schedules reevev1.ScheduleServiceClient // the schedules pages' API (schedules.go)
	queues    reevev1.QueueServiceClient    // the queues page's API (queues.go)
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger; slog.Default() when unset.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithSecure requires a login: the browser gives a bearer token, kept
// server-side for the session and sent with every gRPC call. Off by default:
// the console then calls the API with the connection's own credentials.
func WithSecure(on bool) Option { return func(s *Server) { s.secure = on } }

// WithReadOnly refuses every state-changing request (cancel, retry,
// compensate, ack) whatever the caller's role, and shows no action buttons.
// Off by default.
func WithReadOnly(on bool) Option { return func(s *Server) { s.readOnly = on } }

// WithClock sets the clock used for ages and deadlines; time.Now by default.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns a console that calls the scheduler API over cc. cc carries the
// transport security (TLS to the scheduler); per-session tokens are added
// per call.
func New(cc grpc.ClientConnInterface, opts ...Option) (*Server, error) {
	s := &Server{
		sched:       reevev1.NewSchedulerServiceClient(cc),
		sup:         reevev1.NewSupervisorServiceClient(cc),
		schedules:   reevev1.NewScheduleServiceClient(cc),
		queues:      reevev1.NewQueueServiceClient(cc),
		log:         slog.Default(),
		now:         time.Now,
		callTimeout: 10 * time.Second,
	}
	for _, o := range opts {
		o(s)
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	s.tmpl = tmpl
	s.sessions = newSessions(s.now)
	s.routes()
	return s, nil
}

// ServeHTTP serves the console's pages.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(files, "assets")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheForever(http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/overview", http.StatusSeeOther)
	})
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("GET /login/once", s.loginOncePage)
	m.HandleFunc("POST /login/once", s.loginOnce)
	m.HandleFunc("POST /logout", s.withSession(s.logout))

	m.HandleFunc("GET /overview", s.withSession(s.overviewPage))
	m.HandleFunc("GET /overview/body", s.withSession(s.overviewBody))
	m.HandleFunc("GET /tasks", s.withSession(s.tasksPage))
	m.HandleFunc("GET /tasks/rows", s.withSession(s.tasksRows))
	m.HandleFunc("GET /tasks/counts", s.withSession(s.tasksCounts))
	m.HandleFunc("GET /tasks/events", s.withSession(s.tasksEvents))
	m.HandleFunc("GET /tasks/{id}", s.withSession(s.taskPage))
	m.HandleFunc("GET /tasks/{id}/body", s.withSession(s.taskBody))
	m.HandleFunc("GET /tasks/{id}/events", s.withSession(s.taskEvents))
	m.HandleFunc("GET /tasks/{id}/json", s.withSession(s.taskJSON))
	m.HandleFunc("GET /tasks/{id}/complete", s.withSession(s.completePage))
	m.HandleFunc("POST /tasks/{id}/complete", s.withSession(s.csrf(s.completeStep)))
	m.HandleFunc("GET /tasks/{id}/{action}", s.withSession(s.confirmTaskAction))
	m.HandleFunc("POST /tasks/{id}/{action}", s.withSession(s.csrf(s.taskAction)))
	m.HandleFunc("POST /bulk", s.withSession(s.csrf(s.bulkConfirm)))
	m.HandleFunc("POST /bulk/apply", s.withSession(s.csrf(s.bulkApply)))
	m.HandleFunc("GET /alerts", s.withSession(s.alertsPage))
	m.HandleFunc("GET /alerts/rows", s.withSession(s.alertsRows))
	m.HandleFunc("GET /alerts/events", s.withSession(s.alertsEvents))
	m.HandleFunc("POST /alerts/{id}/ack", s.withSession(s.csrf(s.ackAlert)))
	m.HandleFunc("GET /workflows", s.withSession(s.workflowsPage))
	m.HandleFunc("GET /workflows/{name}", s.withSession(s.workflowPage))
	m.HandleFunc("GET /agents", s.withSession(s.agentsPage))
	m.HandleFunc("GET /waiting", s.withSession(s.waitingPage))
	m.HandleFunc("GET /queues", s.withSession(s.queuesPage))
	m.HandleFunc("POST /queues/{type}/{action}", s.withSession(s.csrf(s.queueAction)))
	m.HandleFunc("GET /schedules", s.withSession(s.schedulesPage))
	m.HandleFunc("GET /schedules/{name}", s.withSession(s.schedulePage))
	m.HandleFunc("POST /schedules/{name}/{action}", s.withSession(s.csrf(s.scheduleAction)))
	m.HandleFunc("/", s.withSession(func(w http.ResponseWriter, r *http.Request, ss *session) {
		s.renderError(w, r, ss, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
	}))
	s.mux = m
}

func cacheForever(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Asset names carry their version (htmx-2.0.11.min.js); console.css
		// and console.js change with the binary, so they are revalidated.
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// Serve serves the console on lis until ctx ends, then shuts down within
// five seconds (open event streams are closed).
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

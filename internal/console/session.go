package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/workflow"
)

const (
	cookieName = "reeve_console"
	// sessionIdle ends a session unused for this long.
	sessionIdle = 12 * time.Hour
	// maxSessions bounds the session table; the least recently used
	// session is dropped beyond it.
	maxSessions = 10000
)

// session is one browser's sign-in: the token its gRPC calls carry (secure
// mode), its CSRF token, and what its identity may do per namespace.
type session struct {
	id    string
	csrf  string
	token string

	mu       sync.Mutex
	lastUsed time.Time
	operator map[string]bool // namespace → may use operator actions
	approver map[string]bool // namespace → may complete steps by name (waiting.go)
}

type sessions struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[string]*session{}}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (ss *sessions) create(token string) *session {
	now := ss.now()
	s := &session{id: randomToken(), csrf: randomToken(), token: token, lastUsed: now, operator: map[string]bool{}, approver: map[string]bool{}}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		var oldest *session
		for _, o := range ss.m {
			if oldest == nil || o.lastUsed.Before(oldest.lastUsed) {
				oldest = o
			}
		}
		delete(ss.m, oldest.id)
	}
	ss.m[s.id] = s
	return s
}

func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return nil
	}
	now := ss.now()
	if now.Sub(s.lastUsed) > sessionIdle {
		delete(ss.m, id)
		return nil
	}
	s.lastUsed = now
	return s
}

func (ss *sessions) drop(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, ss *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: ss.id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// withSession finds the browser's session. In secure mode a browser without
// one is sent to the login page (an event stream gets 401); otherwise a
// session is created on the spot.
func (s *Server) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var ss *session
		if c, err := r.Cookie(cookieName); err == nil {
			ss = s.sessions.get(c.Value)
		}
		if ss == nil {
			if s.secure {
				if r.Method != http.MethodGet || strings.HasSuffix(r.URL.Path, "/events") || r.Header.Get("HX-Request") != "" {
					http.Error(w, "sign in first: /login", http.StatusUnauthorized)
					return
				}
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			ss = s.sessions.create("")
			s.setCookie(w, r, ss)
		}
		h(w, r, ss)
	}
}

// csrf admits a state-changing request only from the console's own pages:
// the Origin header (sent by browsers on every POST) must be this host, a
// cross-site fetch is refused, and the form's csrf field must be the
// session's token. The session cookie is SameSite=Strict as well.
func (s *Server) csrf(h func(http.ResponseWriter, *http.Request, *session)) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, ss *session) {
		if !sameOrigin(r) {
			s.renderError(w, r, ss, http.StatusForbidden, "Refused", "This request came from another site (Origin "+r.Header.Get("Origin")+"): state-changing requests are accepted from the console's own pages only.")
			return
		}
		got := r.PostFormValue("csrf")
		if got == "" {
			got = r.Header.Get("X-CSRF-Token")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) != 1 {
			s.renderError(w, r, ss, http.StatusForbidden, "Refused", "The form's csrf token is missing or stale: reload the page and try again.")
			return
		}
		if s.readOnly {
			s.renderError(w, r, ss, http.StatusForbidden, "Read-only console", "This console runs with --console-read-only: it shows, but does not change, anything.")
			return
		}
		h(w, r, ss)
	}
}

func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
	}
	// No Origin: a non-browser client, or an old browser. Fetch metadata
	// still tells a cross-site request apart.
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin" || site == "none"
}

// call returns a context bounded by the console's call timeout and the
// call options carrying the session's credentials.
func (s *Server) call(r *http.Request, ss *session) (context.Context, context.CancelFunc, []grpc.CallOption) {
	ctx, cancel := context.WithTimeout(r.Context(), s.callTimeout)
	return ctx, cancel, ss.callOpts()
}

func (ss *session) callOpts() []grpc.CallOption {
	if ss.token == "" {
		return nil
	}
	return []grpc.CallOption{grpc.PerRPCCredentials(auth.Token(ss.token))}
}

// mayOperate reports whether the session's identity may use the operator
// actions (retry, compensate, cancel, ack) in namespace ns: the console asks
// the API once per namespace (ListAlerts is for operators only). The
// scheduler checks every action again.
func (s *Server) mayOperate(ctx context.Context, ss *session, ns string) bool {
	if s.readOnly {
		return false
	}
	ss.mu.Lock()
	v, ok := ss.operator[ns]
	ss.mu.Unlock()
	if ok {
		return v
	}
	_, err := s.sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: ns, PageSize: 1}, ss.callOpts()...)
	c := status.Code(err)
	if c != codes.OK && c != codes.PermissionDenied && c != codes.Unauthenticated {
		return false // unknown: ask again next time
	}
	v = c == codes.OK
	ss.mu.Lock()
	ss.operator[ns] = v
	ss.mu.Unlock()
	return v
}

type loginData struct {
	pageData
	Next      string
	Namespace string
	Error     string
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", loginData{pageData: pageData{Title: "Sign in", Secure: s.secure}, Next: safeNext(r.URL.Query().Get("next")), Namespace: workflow.Namespace(r.URL.Query().Get("ns"))})
}

// safeNext keeps a post-login redirect on this site.
func safeNext(n string) string {
	if !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") || strings.HasPrefix(n, "/\\") {
		return "/overview"
	}
	return n
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	data := loginData{pageData: pageData{Title: "Sign in", Secure: s.secure}, Next: safeNext(r.PostFormValue("next")), Namespace: workflow.Namespace(r.PostFormValue("ns"))}
	if !sameOrigin(r) {
		data.Error = "Sign-in refused: the form was posted from another site."
		s.render(w, r, http.StatusForbidden, "login", data)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if !s.secure {
		http.Redirect(w, r, data.Next, http.StatusSeeOther)
		return
	}
	if token == "" {
		data.Error = "token: required"
		s.render(w, r, http.StatusBadRequest, "login", data)
		return
	}
	if err := workflow.ValidateNamespace("namespace", data.Namespace); err != nil {
		data.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, "login", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.callTimeout)
	defer cancel()
	_, err := s.sched.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{Namespace: data.Namespace, PageSize: 1}, grpc.PerRPCCredentials(auth.Token(token)))
	switch status.Code(err) {
	case codes.OK:
	case codes.Unauthenticated:
		data.Error = "token: not accepted by the scheduler"
		s.render(w, r, http.StatusUnauthorized, "login", data)
		return
	case codes.PermissionDenied:
		data.Error = "token: may not read namespace " + data.Namespace + " (" + status.Convert(err).Message() + ")"
		s.render(w, r, http.StatusForbidden, "login", data)
		return
	default:
		data.Error = "the scheduler did not answer: " + status.Convert(err).Message()
		s.render(w, r, http.StatusServiceUnavailable, "login", data)
		return
	}
	ss := s.sessions.create(token)
	s.setCookie(w, r, ss)
	next := data.Next
	if next == "/overview" {
		next = "/overview?ns=" + url.QueryEscape(data.Namespace)
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, ss *session) {
	if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(ss.csrf)) != 1 {
		s.renderError(w, r, ss, http.StatusForbidden, "Refused", "Sign-out must come from the console's own page.")
		return
	}
	s.sessions.drop(ss.id)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

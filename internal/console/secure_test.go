package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

const (
	adminToken  = "console-test-admin-token-0123456789"
	viewerToken = "console-test-viewer-token-0123456789"
	// approverToken reads namespace default and completes its waiting
	// steps (client and approver), without the admin role.
	approverToken = "console-test-approver-token-0123456789"
)

// newSecureEnv starts a scheduler with TLS and bearer tokens (an admin and a
// client, the console's viewer) and a console in secure mode in front of it.
func newSecureEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.ParseTokens([]byte(fmt.Sprintf(`tokens:
  - name: alice
    token: %s
    grants: ["reeve://admin/*"]
  - name: victor
    token: %s
    grants: ["reeve://client/default"]
  - name: paula
    token: %s
    grants: ["reeve://client/default", "reeve://approver/default"]
`, adminToken, viewerToken, approverToken)))
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := tlsconfig.Server(tlsconfig.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Tokens: tokens})
	s := testenv.New(t).StartSchedulerGRPC("", append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(srvCfg))}, a.ServerOptions()...))
	cliCfg, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(dir, "ca.pem")}, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cc := testenv.DialWith(t, s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cliCfg)))
	e := newEnvOn(t, cc, console.WithSecure(true))
	// Test setup calls act as the admin.
	admin := testenv.DialWith(t, s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cliCfg)), grpc.WithPerRPCCredentials(auth.Token(adminToken)))
	e.sched, e.sup = reevev1.NewSchedulerServiceClient(admin), reevev1.NewSupervisorServiceClient(admin)
	return e
}

func TestSecureModeWithoutBrowser(t *testing.T) {
	e := newSecureEnv(t)
	b := e.browser()
	b.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := b.c.Get(e.url + "/tasks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("no session: status %d to %q, want the login page", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Event streams and actions without a session are 401, not a redirect.
	if code, _ := b.get("/tasks/events"); code != http.StatusUnauthorized {
		t.Errorf("event stream without a session: status %d, want 401", code)
	}
	if code, _ := b.post("/tasks/x/cancel", e.url, nil); code != http.StatusUnauthorized {
		t.Errorf("action without a session: status %d, want 401", code)
	}
	for _, c := range []struct {
		token string
		code  int
		want  string
	}{
		{"", http.StatusBadRequest, "token: required"},
		{"wrong-token", http.StatusUnauthorized, "token: not accepted"},
	} {
		code, body := b.post("/login", e.url, map[string][]string{"token": {c.token}})
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("login with %q: status %d, want %d with %q", c.token, code, c.code, c.want)
		}
	}
	if code, _ := b.post("/login", "http://evil.example", map[string][]string{"token": {adminToken}}); code != http.StatusForbidden {
		t.Errorf("cross-site login: status %d, want 403", code)
	}
	resp, err = b.c.PostForm(e.url+"/login", map[string][]string{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "reeve_console" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || strings.Contains(session.Value, adminToken) {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, without the token", session)
	}
}

// Secure mode in a real browser: no session → the login page; a viewer
// sees no action; a forged cross-site form post is refused.
func TestBrowserSecureMode(t *testing.T) {
	ctx, _ := chrome(t, nil)
	e := newSecureEnv(t)
	dir := shots(t)
	task := e.submit(stuck())

	run(t, ctx, "no token", chromedp.Navigate(e.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	screenshot(t, ctx, dir, "login")

	// The viewer (a client-role token) sees the task but no action.
	run(t, ctx, "viewer signs in", chromedp.SendKeys(chromedp.CSS("#token"), viewerToken), chromedp.Submit(chromedp.CSS("#login-form")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-href^="/tasks/`+task.GetId()+`"]`)))
	if html := outer(t, ctx, "main"); strings.Contains(html, "Bulk action") {
		t.Error("viewer: the list offers bulk actions")
	}
	run(t, ctx, "viewer opens the task", chromedp.Navigate(e.url+"/tasks/"+task.GetId()), chromedp.WaitVisible(chromedp.CSS("#task-state")))
	if html := outer(t, ctx, "main"); strings.Contains(html, "action-cancel") || strings.Contains(html, "action-compensate") {
		t.Error("viewer: the task page shows action buttons")
	}
	screenshot(t, ctx, dir, "viewer-task")

	// The operator signs in; a page of another site posts a cancel form to
	// the console with the operator's cookie: refused by the Origin check.
	run(t, ctx, "sign out", chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Submit(chromedp.CSS("#login-form")),
		chromedp.WaitVisible(chromedp.CSS("#ov-running")),
		chromedp.Navigate(e.url+"/tasks/"+task.GetId()), chromedp.WaitVisible(chromedp.CSS("#action-cancel")))
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/tasks/%s/cancel"><input name="ns" value="default"><input name="csrf" value="guessed"><button id="go">win a prize</button></form>`, e.url, task.GetId())
	}))
	defer evil.Close()
	run(t, ctx, "forged post", chromedp.Navigate(evil.URL), chromedp.Click(chromedp.CSS("#go")), chromedp.WaitVisible(chromedp.CSS(".error-msg")))
	if msg := text(t, ctx, ".error-msg"); !strings.Contains(msg, "another site") {
		t.Errorf("forged post: got %q, want the cross-site refusal", msg)
	}
	screenshot(t, ctx, dir, "forged-post")
	got := e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_PENDING)
	if got.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Fatalf("the forged post changed the task: %v", got.GetState())
	}
}

// outer returns the HTML of the first element matching sel.
func outer(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("html of %s: %v", sel, err)
	}
	return html
}

// A viewer's session posting an action with a valid csrf token is refused
// by the console itself, even for an action its role could call directly
// (a client may cancel through the API): the console shows viewers no
// action and enforces that.
func TestViewerActionRefusedByConsole(t *testing.T) {
	e := newSecureEnv(t)
	task := e.submit(stuck())
	b := e.browser()
	if code, _ := b.post("/login", e.url, map[string][]string{"token": {viewerToken}}); code != http.StatusOK {
		t.Fatalf("viewer login: status %d", code)
	}
	_, page := b.get("/tasks/" + task.GetId())
	code, body := b.post("/tasks/"+task.GetId()+"/cancel", e.url, map[string][]string{"csrf": {csrf(t, page)}, "ns": {"default"}})
	if code != http.StatusForbidden || !strings.Contains(body, "may not use operator actions") {
		t.Fatalf("viewer cancel: status %d, want 403", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := e.sched.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: task.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTask().GetState() == reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatal("the viewer canceled the task")
	}
}

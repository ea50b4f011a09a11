package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSecureDevRecoversAndUndoesTheDemos is the operator's walk of
// README's demos in the secure mode: `reeve dev --secure --demo`, then the
// CLI as admin with the certificates it made. The supervisor's recovery
// goes through the same role checks as everyone's calls (it was once
// refused there, and demo.timeout never finished).
func TestSecureDevRecoversAndUndoesTheDemos(t *testing.T) {
	dir := t.TempDir()
	addr, stdout, stderr := startDev(t, "--secure", "--demo", "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0",
		"--data-dir", dir, "--supervisor-tick", "200ms", "--log-level", "info")
	if !strings.Contains(stdout.String(), "(TLS with role checks)") {
		t.Fatalf("reeve dev --secure printed %q; want it to serve TLS with role checks", stdout.String())
	}
	certs := filepath.Join(dir, "certs")
	admin := map[string]string{
		"REEVE_ADDRESS": addr, "REEVE_TLS_CA": filepath.Join(certs, "ca.pem"),
		"REEVE_TLS_CERT": filepath.Join(certs, "admin.pem"), "REEVE_TLS_KEY": filepath.Join(certs, "admin-key.pem"),
	}
	waitUntil(t, time.Minute, "the demo workflows to be registered", func() bool {
		code, _, _ := reeveEnv(t, admin, "workflow", "get", "demo.timeout")
		return code == 0
	})

	// demo.timeout: attempt 1 never answers; the supervisor retries it.
	code, out, errOut := reeveEnv(t, admin, "task", "submit", "--workflow", "demo.timeout", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("demo.timeout: exit %d: %s", code, errOut)
	}
	var task struct {
		State   string
		Steps   []struct{ Attempt, FailureCount int }
		History []struct{ Kind, Actor string }
	}
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatal(err)
	}
	retried := false
	for _, h := range task.History {
		retried = retried || h.Kind == "step.expired" && strings.HasPrefix(h.Actor, "supervisor/")
	}
	if task.State != "TASK_STATE_SUCCEEDED" || task.Steps[0].Attempt != 2 || !retried {
		t.Fatalf("demo.timeout: %+v, want SUCCEEDED at attempt 2 after the supervisor expired attempt 1", task)
	}

	// demo.compensate: shipping fails for good; charge and reserve are undone.
	code, out, errOut = reeveEnv(t, admin, "task", "submit", "--workflow", "demo.compensate", "--wait", "-o", "json")
	if code != 3 || !strings.Contains(out, `"TASK_STATE_COMPENSATED"`) || strings.Count(out, `"STEP_STATE_COMPENSATED"`) != 2 {
		t.Fatalf("demo.compensate: exit %d, want a COMPENSATED task with two compensated steps: %s %s", code, out, errOut)
	}

	// A task that fails for good raises an alert; the admin retries the step.
	wf := filepath.Join(t.TempDir(), "fragile.json")
	def := `{"name":"fragile","steps":[{"name":"reserve","type":"inventory.reserve"},{"name":"ship","type":"shipping.ship_fail","dependsOn":["reserve"]}]}`
	if err := os.WriteFile(wf, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := reeveEnv(t, admin, "task", "submit", "-f", wf, "--id", "fragile-1", "--wait"); code != 3 || !strings.Contains(out, "STATE:      FAILED") {
		t.Fatalf("fragile: exit %d: %s %s", code, out, errOut)
	}
	code, out, errOut = reeveEnv(t, admin, "alerts", "list", "-o", "json")
	var alerts struct {
		Alerts []struct{ ID, TaskID, Step string }
	}
	if err := json.Unmarshal([]byte(out), &alerts); code != 0 || err != nil || len(alerts.Alerts) != 1 || alerts.Alerts[0].TaskID != "fragile-1" {
		t.Fatalf("alerts list: exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := reeveEnv(t, admin, "task", "retry", "fragile-1", "ship", "--reason", "carrier fixed"); code != 0 || !strings.Contains(out, "step.retried_by_operator") {
		t.Fatalf("retry as admin: exit %d: %s %s", code, out, errOut)
	}
	// A client may not: operator actions are the admin's.
	client := map[string]string{}
	for k, v := range admin {
		client[k] = strings.ReplaceAll(v, "admin", "client")
	}
	if code, _, errOut := reeveEnv(t, client, "task", "retry", "fragile-1", "ship"); code != exitError || !strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("retry as client: exit %d (%s), want PermissionDenied", code, errOut)
	}
	if log := stderr.String(); strings.Contains(log, "caller=cert:supervisor") {
		t.Fatalf("a call of the supervisor was refused:\n%s", log)
	}
}

// startDev runs `reeve dev args...` until the test ends (then it must exit
// 0; its log is shown when the test failed) and returns the scheduler's
// address once it printed it, and its standard output and error.
func startDev(t *testing.T, args ...string) (addr string, stdout, stderr *syncBuffer) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	devCode := -1
	devDone := make(chan struct{})
	go func() {
		defer close(devDone)
		devCode = run(ctx, append([]string{"dev"}, args...), stdout, stderr, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		stop()
		<-devDone
		if devCode != 0 {
			t.Errorf("reeve dev exited %d: %s", devCode, stderr.String())
		}
		if t.Failed() {
			t.Logf("reeve dev's log:\n%s", stderr.String())
		}
	})
	addrLine := regexp.MustCompile(`reeve dev: scheduler and supervisor on (\S+) `)
	waitUntil(t, time.Minute, "reeve dev to print its address", func() bool {
		select {
		case <-devDone:
			t.Fatalf("reeve dev exited %d: %s", devCode, stderr.String())
		default:
		}
		if m := addrLine.FindStringSubmatch(stdout.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	return addr, stdout, stderr
}

// waitUntil polls cond every 50ms until it holds, failing t after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// `reeve dev --secure` prints a one-time sign-in link for its console: the
// link's page posts the code, which signs that browser in as admin (no
// token minted, split or restarted for); the code works once.
func TestSecureDevConsoleOneTimeSignIn(t *testing.T) {
	_, stdout, _ := startDev(t, "--secure", "--demo", "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	linkRe := regexp.MustCompile(`reeve console: sign in once as admin, without a token: (http://[^/\s]+)/login/once\?code=(\S+)`)
	var base, code string
	waitUntil(t, time.Minute, "reeve dev to print the console's sign-in link", func() bool {
		m := linkRe.FindStringSubmatch(stdout.String())
		if m != nil {
			base, code = m[1], m[2]
		}
		return m != nil
	})
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func() (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/login/once", strings.NewReader(url.Values{"code": {code}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Opening the link (or a browser prefetching it) signs nobody in.
	if st, body := get("/login/once?code=" + code); st != http.StatusOK || !strings.Contains(body, `id="once-form"`) || !strings.Contains(body, code) {
		t.Fatalf("the link's page: status %d, want the sign-in button with the code:\n%s", st, body)
	}
	if st, body := get("/workflows"); st != http.StatusOK || !strings.Contains(body, `id="login-form"`) {
		t.Fatalf("before the button: status %d, want the sign-in page:\n%s", st, body)
	}
	if st, body := post(); st != http.StatusOK || !strings.Contains(body, "Overview") {
		t.Fatalf("sign in with the code: status %d, want the overview:\n%s", st, body)
	}
	waitUntil(t, time.Minute, "the demo workflows in the console", func() bool {
		st, body := get("/workflows")
		return st == http.StatusOK && strings.Contains(body, "demo.orders")
	})
	if st, body := get("/alerts"); st != http.StatusOK || strings.Contains(body, "viewer") {
		t.Fatalf("alerts as the signed-in admin: status %d:\n%s", st, body)
	}
	// Once only: another browser with the same code gets the sign-in page.
	c.Jar, _ = cookiejar.New(nil)
	if st, body := post(); st != http.StatusUnauthorized || !strings.Contains(body, "used already") {
		t.Fatalf("the code again: status %d, want 401 saying it was used:\n%s", st, body)
	}
}

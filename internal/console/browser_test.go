package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// chrome starts a headless Chromium (Debian's chromium package) with a fresh
// profile. The browser tests run with REEVE_REQUIRE_BROWSER=1 (make
// e2e-console, part of make e2e: a missing chromium is then a failure) or
// REEVE_BROWSER_TESTS=1 (skipped without chromium); a plain go test skips
// them, so that make test does not run them twice. Every JavaScript dialog is
// recorded; accept decides whether to accept it (else it is dismissed).
func chrome(t *testing.T, accept func(msg string) bool) (context.Context, *dialogs) {
	t.Helper()
	required := os.Getenv("REEVE_REQUIRE_BROWSER") == "1"
	if !required && os.Getenv("REEVE_BROWSER_TESTS") != "1" {
		t.Skip("browser checks run in make e2e-console (or with REEVE_BROWSER_TESTS=1)")
	}
	path := os.Getenv("REEVE_CHROMIUM")
	if path == "" {
		for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(n); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if required {
			t.Fatal("no chromium on PATH (apt-get install -y chromium)")
		}
		t.Skip("no chromium on PATH: browser checks skipped (make e2e-console installs it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	d := &dialogs{}
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			d.add(ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept != nil && accept(ev.Message)})
		}
	}()
	return ctx, d
}

type dialogs struct {
	mu   sync.Mutex
	msgs []string
}

func (d *dialogs) add(m string) { d.mu.Lock(); d.msgs = append(d.msgs, m); d.mu.Unlock() }
func (d *dialogs) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.msgs...)
}

// shots is where screenshots go: $REEVE_CONSOLE_SCREENSHOTS, else a
// temporary directory of the test.
func shots(t *testing.T) string {
	if d := os.Getenv("REEVE_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// screenshot writes the whole page as <name>.png and what a laptop screen
// shows first as <name>-top.png (the ones docs/console.md uses).
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	for file, shot := range map[string]chromedp.Action[[]byte]{name: chromedp.FullScreenshot(100), name + "-top": chromedp.CaptureScreenshot()} {
		png, err := chromedp.Run(ctx, shot)
		if err != nil {
			t.Fatalf("screenshot %s: %v", file, err)
		}
		p := filepath.Join(dir, file+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func eval(t *testing.T, ctx context.Context, js string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// poll waits until the JavaScript expression js is true (at most d).
func poll(t *testing.T, ctx context.Context, what, js string, d time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(d))); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// across waits until the JavaScript expression js is true (at most d) while
// the page may navigate: a navigation ends an evaluation under way (poll
// would fail), so js is evaluated again, every 50ms, on whatever page is
// shown.
func across(t *testing.T, ctx context.Context, what, js string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true within %v (last error: %v)", what, d, last)
}

// The console in a real browser: tasks appear and change state live,
// the compensated task shows its compensations in reverse order, an
// operator retries and cancels from the page, user text stays text.
func TestBrowserConsole(t *testing.T) {
	ctx, dlg := chrome(t, func(msg string) bool { return strings.HasPrefix(msg, "Acknowledge") })
	e := newEnv(t)
	dir := shots(t)

	// A running demo.timeout: its page updates live to succeeded after the
	// supervisor retried the silent first attempt.
	timeout := e.submit(ref("demo.timeout"))
	run(t, ctx, "open demo.timeout", chromedp.Navigate(e.url+"/tasks/"+timeout.GetId()),
		chromedp.WaitVisible(chromedp.CSS("#task-state")))
	eval(t, ctx, `window.__noReload = 1`)
	run(t, ctx, "demo.timeout succeeds live", chromedp.WaitVisible(chromedp.CSS("#task-state.st-succeeded")))
	if eval(t, ctx, `window.__noReload || 0`) != 1 {
		t.Fatal("the task page reloaded instead of updating in place")
	}
	story := text(t, ctx, "#story")
	for _, want := range []string{"step.expired", "supervisor/", "no result before complete-by", "step.retry_scheduled"} {
		if !strings.Contains(story, want) {
			t.Errorf("demo.timeout story: want %q in %q", want, story)
		}
	}
	screenshot(t, ctx, dir, "task-timeout")

	// The tasks list: new tasks appear and change state without a reload.
	run(t, ctx, "open tasks", chromedp.Navigate(e.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#tasks-table")))
	eval(t, ctx, `window.__noReload = 1`)
	orders := e.submit(ref("demo.orders"))
	comp := e.submit(ref("demo.compensate"))
	failed := e.submit(failing(structpb.NewStringValue(xss)))
	pending := e.submit(stuck())
	for _, id := range []string{orders.GetId(), comp.GetId(), failed.GetId(), pending.GetId()} {
		run(t, ctx, "row of "+id+" appears", chromedp.WaitVisible(chromedp.CSS(`tr[data-href^="/tasks/`+id+`"]`)))
	}
	run(t, ctx, "rows change state", chromedp.WaitVisible(chromedp.CSS(`tr.st-succeeded[data-href^="/tasks/`+orders.GetId()+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.st-compensated[data-href^="/tasks/`+comp.GetId()+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.st-failed[data-href^="/tasks/`+failed.GetId()+`"]`)))
	if eval(t, ctx, `window.__noReload || 0`) != 1 {
		t.Fatal("the tasks list reloaded instead of updating in place")
	}
	screenshot(t, ctx, dir, "tasks")
	// Keyboard: j selects the first row, Enter opens it (Enter opens nothing
	// without a selected row). The row's focus mark is not waited for: a
	// live reload of the list may replace the row, and the selection with
	// it, at any moment.
	run(t, ctx, "keyboard", chromedp.KeyEvent("j"), chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS("#task-state")))

	// demo.compensate: charge is undone before reserve.
	run(t, ctx, "open demo.compensate", chromedp.Navigate(e.url+"/tasks/"+comp.GetId()), chromedp.WaitVisible(chromedp.CSS("#task-state.st-compensated")))
	tl := text(t, ctx, "#timeline")
	ci, ri := strings.Index(tl, "↺ charge"), strings.Index(tl, "↺ reserve")
	if ci < 0 || ri < 0 || ci > ri {
		t.Errorf("timeline: want the compensation of charge before that of reserve, got %q", tl)
	}
	story = text(t, ctx, "#story")
	if !strings.Contains(story, "carrier rejected the parcel") || !strings.Contains(story, "compensation.succeeded") {
		t.Errorf("demo.compensate story: want the failure and the compensations, got %q", story)
	}
	screenshot(t, ctx, dir, "task-compensate")
	run(t, ctx, "dark theme", chromedp.Click(chromedp.CSS("#theme-toggle")))
	poll(t, ctx, "dark theme applied", `document.documentElement.getAttribute('data-theme') === 'dark'`, 30*time.Second)
	screenshot(t, ctx, dir, "task-compensate-dark")
	run(t, ctx, "light theme", chromedp.Click(chromedp.CSS("#theme-toggle")))
	poll(t, ctx, "light theme applied", `document.documentElement.getAttribute('data-theme') === 'light'`, 30*time.Second)

	// A failed task whose input and error hold markup: shown as text, and
	// an operator retries its step from the page.
	run(t, ctx, "open failed task", chromedp.Navigate(e.url+"/tasks/"+failed.GetId()), chromedp.WaitVisible(chromedp.CSS("#task-state.st-failed")))
	if in := text(t, ctx, "#json-input"); !strings.Contains(in, `<script>alert(\"pwned\")</script>`) {
		t.Errorf("input: want the markup shown as text, got %q", in)
	}
	screenshot(t, ctx, dir, "task-failed")
	run(t, ctx, "retry", chromedp.Click(chromedp.CSS("#retry-ship")), chromedp.WaitVisible(chromedp.CSS("#confirm-form")))
	screenshot(t, ctx, dir, "confirm-retry")
	run(t, ctx, "confirm retry", chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "carrier fixed"),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#history")))
	poll(t, ctx, "retried", `document.querySelector('#history').textContent.includes('step.retried_by_operator')`, time.Minute)

	// Cancel from the page.
	run(t, ctx, "open pending task", chromedp.Navigate(e.url+"/tasks/"+pending.GetId()), chromedp.WaitVisible(chromedp.CSS("#action-cancel")),
		chromedp.WaitVisible(chromedp.CSS("#action-cancel-keep-done")))
	screenshot(t, ctx, dir, "task-pending")
	run(t, ctx, "pause", chromedp.Click(chromedp.CSS("#action-pause")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#task-paused")))
	screenshot(t, ctx, dir, "task-paused")
	run(t, ctx, "resume", chromedp.Click(chromedp.CSS("#action-resume")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#action-pause")))
	run(t, ctx, "cancel", chromedp.Click(chromedp.CSS("#action-cancel")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	screenshot(t, ctx, dir, "confirm-cancel")
	run(t, ctx, "confirm cancel", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#task-state.st-canceled")))
	screenshot(t, ctx, dir, "task-canceled")

	// Alerts: the failed task's alert, acknowledged from the page.
	run(t, ctx, "alerts", chromedp.Navigate(e.url+"/alerts"), chromedp.WaitVisible(chromedp.CSS(`#alerts-table a[href^="/tasks/`+failed.GetId()+`"]`)))
	screenshot(t, ctx, dir, "alerts")
	// Acknowledge one alert (the retry of the failed task may have raised a
	// second one, open still). The click posts its form; the page it lands
	// on, the open alerts, no longer has that form once the acknowledgement
	// is recorded. Leaving before that would cancel the request.
	action, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('button.ack').form.getAttribute('action')`))
	if err != nil || !strings.HasPrefix(action, "/alerts/") {
		t.Fatalf("ack form: action %q, %v", action, err)
	}
	form := `form[action="` + action + `"]`
	run(t, ctx, "ack", chromedp.Click(chromedp.CSS(form+" button.ack")))
	across(t, ctx, "alert acknowledged", `!!document.querySelector('#alerts-table') && !document.querySelector('`+form+`')`, time.Minute)
	run(t, ctx, "all alerts", chromedp.Navigate(e.url+"/alerts?all=1"), chromedp.WaitVisible(chromedp.CSS("#alerts-table")))
	poll(t, ctx, "acknowledged", `document.querySelector('#alerts-table').textContent.includes('acknowledged by console')`, 30*time.Second)

	run(t, ctx, "workflows", chromedp.Navigate(e.url+"/workflows"), chromedp.WaitVisible(chromedp.CSS("#workflows")))
	screenshot(t, ctx, dir, "workflows")
	run(t, ctx, "workflow", chromedp.Navigate(e.url+"/workflows/demo.orders"), chromedp.WaitVisible(chromedp.CSS("#policies")))
	screenshot(t, ctx, dir, "workflow")
	run(t, ctx, "agents", chromedp.Navigate(e.url+"/agents"), chromedp.WaitVisible(chromedp.CSS("#agents")))
	if a := text(t, ctx, "#agents-body"); !strings.Contains(a, "demo-agent") && !strings.Contains(a, "does not serve ListAgents") {
		t.Errorf("agents page: want demo-agent listed, got %q", a)
	}
	screenshot(t, ctx, dir, "agents")
	run(t, ctx, "overview", chromedp.Navigate(e.url+"/overview"), chromedp.WaitVisible(chromedp.CSS("#ov-running")))
	screenshot(t, ctx, dir, "overview")

	for _, m := range dlg.all() {
		if !strings.HasPrefix(m, "Acknowledge") {
			t.Errorf("a dialog opened: %q (user text ran as script?)", m)
		}
	}
	e.waitState(pending.GetId(), reevev1.TaskState_TASK_STATE_CANCELED)
}

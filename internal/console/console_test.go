package console_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/console"
)

// User text (task input, an agent's error message, the task's reason) is
// shown as text on every page, never run as markup.
func TestUserTextIsEscaped(t *testing.T) {
	e := newEnv(t)
	task := e.submit(failing(structpb.NewStringValue(xss)))
	e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	b := e.browser()
	pages := []string{"/tasks/" + task.GetId(), "/tasks", "/alerts", "/overview", "/tasks/" + task.GetId() + "?failures=1"}
	for _, p := range pages {
		code, body := b.get(p)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d", p, code)
		}
		for _, raw := range []string{"<script>alert", "<img src=x"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: contains unescaped %q", p, raw)
			}
		}
	}
	_, body := b.get("/tasks/" + task.GetId())
	for _, want := range []string{"&lt;script&gt;alert(", "&lt;img src=x onerror=alert(1)&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("task page: want the input and error shown as text %q", want)
		}
	}
}

func TestNotFoundAndBadFilters(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	cases := []struct {
		path string
		code int
		want string
	}{
		{"/tasks/no-such-task", http.StatusNotFound, "no-such-task"},
		{"/tasks?ns=no-such-ns", http.StatusNotFound, "Unknown namespace"},
		{"/tasks/x?ns=no-such-ns", http.StatusNotFound, "no-such-ns"},
		{"/tasks/bad%2Fid", http.StatusNotFound, "task id"},
		{"/tasks?state=bogus", http.StatusBadRequest, "state: unknown task state"},
		{"/tasks?after=yesterday", http.StatusBadRequest, "after: want a time"},
		{"/tasks?after=2026-11-24&before=2026-11-23", http.StatusBadRequest, "after: must be before"},
		{"/tasks?workflow=a%20b", http.StatusBadRequest, "workflow"},
		{"/tasks?size=0", http.StatusBadRequest, "size:"},
		{"/tasks?ns=bad%2Fns", http.StatusBadRequest, "ns"},
		{"/tasks?page=forged", http.StatusBadRequest, "page_token"},
		{"/workflows/no.such.workflow", http.StatusNotFound, "no.such.workflow"},
		{"/no/such/page", http.StatusNotFound, "There is no page"},
	}
	for _, c := range cases {
		code, body := b.get(c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: status %d, want %d with %q; body %.300s", c.path, code, c.code, c.want, textOf(body))
		}
		if strings.Contains(body, "goroutine ") || strings.Contains(body, "panic") {
			t.Errorf("GET %s: a stack trace in the page", c.path)
		}
	}
}

// textOf strips markup, for failure messages.
func textOf(html string) string {
	if i := strings.Index(html, "<main>"); i >= 0 {
		html = html[i:]
	}
	return html
}

// A state-changing request is refused unless it comes from the console's
// own page: another Origin, or no csrf token, changes nothing.
func TestCrossSitePostIsRefused(t *testing.T) {
	e := newEnv(t)
	task := e.submit(stuck())
	b := e.browser()
	_, page := b.get("/tasks/" + task.GetId() + "/cancel")
	token := csrf(t, page)
	path := "/tasks/" + task.GetId() + "/cancel"
	cases := []struct {
		name   string
		origin string
		form   url.Values
	}{
		{"other origin", "http://evil.example", url.Values{"csrf": {token}, "ns": {"default"}}},
		{"other port", strings.Replace(e.url, "127.0.0.1:", "127.0.0.1:1", 1), url.Values{"csrf": {token}, "ns": {"default"}}},
		{"no csrf", e.url, url.Values{"ns": {"default"}}},
		{"wrong csrf", e.url, url.Values{"csrf": {"x" + token}, "ns": {"default"}}},
	}
	for _, c := range cases {
		code, _ := b.post(path, c.origin, c.form)
		if code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", c.name, code)
		}
	}
	// A session of another browser does not share the token.
	other := e.browser()
	other.get("/tasks")
	if code, _ := other.post(path, e.url, url.Values{"csrf": {token}, "ns": {"default"}}); code != http.StatusForbidden {
		t.Errorf("another session's token: status %d, want 403", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := e.sched.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: task.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTask().GetState() == reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatal("a refused request canceled the task")
	}
	// The page's own form works.
	code, body := b.post(path, e.url, url.Values{"csrf": {token}, "ns": {"default"}, "reason": {"operator test"}})
	if code != http.StatusOK || !strings.Contains(body, `id="task-state">canceled`) {
		t.Fatalf("own form: status %d, want the canceled task page; %.400s", code, textOf(body))
	}
	canceled := e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_CANCELED)
	if !strings.Contains(canceled.GetReason(), "operator test") {
		t.Errorf("reason %q: want the operator's reason recorded", canceled.GetReason())
	}
}

// A read-only console shows no action and refuses one posted anyway.
func TestReadOnly(t *testing.T) {
	e := newEnv(t, console.WithReadOnly(true))
	task := e.submit(stuck())
	b := e.browser()
	_, page := b.get("/tasks/" + task.GetId())
	if strings.Contains(page, `id="action-cancel"`) || strings.Contains(page, "Compensate task") {
		t.Error("read-only: the task page shows action buttons")
	}
	_, list := b.get("/tasks")
	if strings.Contains(list, "Bulk action") {
		t.Error("read-only: the list shows bulk actions")
	}
	code, _ := b.post("/tasks/"+task.GetId()+"/cancel", e.url, url.Values{"csrf": {csrf(t, page)}, "ns": {"default"}})
	if code != http.StatusForbidden {
		t.Fatalf("read-only cancel: status %d, want 403", code)
	}
}

// Bulk cancel of "all matching this filter" lists the tasks to confirm and
// cancels exactly those.
func TestBulkCancelByFilter(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for range 3 {
		ids = append(ids, e.submit(stuck()).GetId())
	}
	done := e.submit(ref("demo.orders"))
	e.waitState(done.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	b := e.browser()
	_, page := b.get("/tasks?state=pending")
	token := csrf(t, page)
	code, confirm := b.post("/bulk", e.url, url.Values{"csrf": {token}, "action": {"cancel"}, "scope": {"filter"}, "filter": {"ns=default&state=pending"}})
	if code != http.StatusOK {
		t.Fatalf("bulk confirm: status %d: %.400s", code, textOf(confirm))
	}
	for _, id := range ids {
		if !strings.Contains(confirm, id) {
			t.Errorf("confirmation does not list %s", id)
		}
	}
	if strings.Contains(confirm, done.GetId()) {
		t.Error("confirmation lists a task outside the filter")
	}
	form := url.Values{"csrf": {token}, "action": {"cancel"}, "ns": {"default"}, "id": ids}
	code, result := b.post("/bulk/apply", e.url, form)
	if code != http.StatusOK || !strings.Contains(result, "3 done, 0 refused") {
		t.Fatalf("bulk apply: status %d: %.400s", code, textOf(result))
	}
	for _, id := range ids {
		e.waitState(id, reevev1.TaskState_TASK_STATE_CANCELED)
	}
}

// The compensated demo task's page lists the compensation of charge before
// that of reserve (reverse order), and says why: the permanent failure and
// the escalation.
func TestCompensationsInReverseOrder(t *testing.T) {
	e := newEnv(t)
	task := e.submit(ref("demo.compensate"))
	e.waitState(task.GetId(), reevev1.TaskState_TASK_STATE_COMPENSATED)
	_, page := e.browser().get("/tasks/" + task.GetId())
	ci, ri := strings.Index(page, "↺ charge #"), strings.Index(page, "↺ reserve #")
	if ci < 0 || ri < 0 || ci > ri {
		t.Errorf("timeline: compensation of charge at %d, of reserve at %d: want charge first", ci, ri)
	}
	for _, want := range []string{"carrier rejected the parcel", "step.escalated", "compensation.succeeded"} {
		if !strings.Contains(page, want) {
			t.Errorf("task page: want %q", want)
		}
	}
}

// The task page's event stream sends the page body when the task changes.
func TestTaskEventStream(t *testing.T) {
	e := newEnv(t)
	task := e.submit(stuck())
	b := e.browser()
	b.get("/tasks")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/tasks/"+task.GetId()+"/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		var ev strings.Builder
		for sc.Scan() {
			if sc.Text() == "" {
				events <- ev.String()
				ev.Reset()
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
	}()
	next := func(want string) string {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended before %q", want)
				}
				if strings.Contains(ev, "event: task") && strings.Contains(ev, want) {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no event with %q", want)
			}
		}
	}
	first := next(`id="task-state">pending`)
	if !strings.Contains(first, "id: ") {
		t.Errorf("event without an id (Last-Event-ID): %.200s", first)
	}
	if _, err := e.sched.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: task.GetId(), Reason: "stream test"}); err != nil {
		t.Fatal(err)
	}
	next(`id="task-state">canceled`)
}

// sseEvents reads the events of one Server-Sent-Events response.
func sseEvents(t *testing.T, ctx context.Context, b *browser, path, lastID string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.e.url+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 64)
	go func() {
		defer resp.Body.Close()
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			if sc.Text() == "" {
				if strings.Contains(ev.String(), "event: ") {
					events <- ev.String()
				}
				ev.Reset()
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
	}()
	return events
}

var (
	revParam = regexp.MustCompile(`sse-connect="/tasks/events\?[^"]*rev=(\d+)`)
	eventID  = regexp.MustCompile(`(?m)^id: (\d+)$`)
)

// The tasks list's stream resumes from the revision the page was listed at:
// a change after it is a "changed" event whose id is its revision, and a
// reconnect with that id as Last-Event-ID does not repeat it.
func TestTasksEventStreamResumes(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	_, page := b.get("/tasks")
	m := revParam.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the tasks page has no revision in its stream URL")
	}
	// A change between the list and the stream's start is not lost.
	task := e.submit(stuck())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := sseEvents(t, ctx, b, "/tasks/events?ns=default&rev="+m[1], "")
	var id string
	select {
	case ev := <-first:
		if !strings.Contains(ev, "event: changed") {
			t.Fatalf("first event %q, want changed", ev)
		}
		mm := eventID.FindStringSubmatch(ev)
		if mm == nil {
			t.Fatalf("changed event without an id: %q", ev)
		}
		id = mm[1]
	case <-ctx.Done():
		t.Fatal("no changed event for a task submitted after the list")
	}
	// Reconnect from that event: nothing until the next change.
	sctx, stop := context.WithCancel(ctx)
	again := sseEvents(t, sctx, b, "/tasks/events?ns=default&rev="+m[1], id)
	select {
	case ev := <-again:
		t.Fatalf("reconnect repeated an event: %q", ev)
	case <-time.After(2 * time.Second):
	}
	if _, err := e.sched.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: task.GetId()}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-again:
		if !strings.Contains(ev, "event: changed") {
			t.Fatalf("event %q, want changed", ev)
		}
	case <-ctx.Done():
		t.Fatal("no changed event after the cancel")
	}
	stop()
}

// After etcd compacted past the page's revision, the stream still tells the
// page to reload (the API's reset), then follows the changes after it.
func TestTasksEventStreamAfterCompaction(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	_, page := b.get("/tasks")
	m := revParam.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the tasks page has no revision in its stream URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		e.submit(stuck())
	}
	resp, err := e.etcd.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.etcd.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	events := sseEvents(t, ctx, b, "/tasks/events?ns=default&rev="+m[1], "")
	select {
	case ev := <-events:
		if !strings.Contains(ev, "event: changed") {
			t.Fatalf("event %q, want changed", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event after a compaction past the page's revision")
	}
	e.submit(stuck())
	select {
	case ev := <-events:
		if !strings.Contains(ev, "event: changed") {
			t.Fatalf("event %q, want changed", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event for a change after the reset")
	}
}

// The confirmation form of an operator action carries a request_id: posting
// it twice (a reload, a double click) compensates the task once and shows
// the task both times.
func TestConfirmedActionPostedTwiceActsOnce(t *testing.T) {
	e := newEnv(t)
	task := e.submit(stuck())
	b := e.browser()
	code, page := b.get("/tasks/" + task.GetId() + "/compensate")
	if code != http.StatusOK {
		t.Fatalf("confirm page: status %d: %.400s", code, textOf(page))
	}
	m := regexp.MustCompile(`name="request_id" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("confirm page has no request_id: %.400s", textOf(page))
	}
	form := url.Values{"csrf": {csrf(t, page)}, "ns": {"default"}, "request_id": {m[1]}}
	for i := range 2 {
		if code, body := b.post("/tasks/"+task.GetId()+"/compensate", e.url, form); code != http.StatusOK {
			t.Fatalf("post %d: status %d: %.400s", i, code, textOf(body))
		}
	}
	got, err := e.sched.GetTask(context.Background(), &reevev1.GetTaskRequest{TaskId: task.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range got.GetTask().GetHistory() {
		if ev.GetRequestId() == m[1] && ev.GetKind() == "task.compensating" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d task.compensating events with the request id, want 1: %v", n, got.GetTask().GetHistory())
	}
}

// The tasks page filters by label (issue 37): only the labeled task is
// listed; a malformed label is shown as the filter's error.
func TestTasksPageFiltersByLabel(t *testing.T) {
	e := newEnv(t)
	plain := e.submit(stuck())
	req := stuck()
	req.Labels = map[string]string{"team": "payments"}
	labeled := e.submit(req)
	b := e.browser()
	_, page := b.get("/tasks?label=team%3Dpayments")
	if !strings.Contains(page, labeled.GetId()) || strings.Contains(page, plain.GetId()) {
		t.Fatalf("label filter: want %s listed and %s not:\n%.600s", labeled.GetId(), plain.GetId(), textOf(page))
	}
	_, page = b.get("/tasks?label=nokeyvalue")
	if !strings.Contains(page, "label: want key=value") {
		t.Fatalf("a malformed label filter: %.400s", textOf(page))
	}
}

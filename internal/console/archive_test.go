package console_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/scheduler"
)

// The console over an archive (issue 25): tasks that ended and moved from
// etcd to the archive stay in the tasks list with their state, in the
// counts and under a state filter, and their pages show their final state,
// story and timeline; a FAILED task (kept in etcd for the retention) and a
// live one are listed beside them.
func TestBrowserArchive(t *testing.T) {
	ctx, dlg := chrome(t, nil)
	e := newArchiveEnv(t)
	dir := shots(t)

	// The tasks list is open while the tasks run, end and move.
	run(t, ctx, "open tasks", chromedp.Navigate(e.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#tasks-table")))
	orders := e.submit(ref("demo.orders"))
	comp := e.submit(ref("demo.compensate"))
	failed := e.submit(failing(structpb.NewStringValue("parcel")))
	pending := e.submit(stuck())
	e.waitArchived(orders.GetId(), reevev1.TaskState_TASK_STATE_SUCCEEDED)
	e.waitArchived(comp.GetId(), reevev1.TaskState_TASK_STATE_COMPENSATED)
	e.waitState(failed.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	// A change after the moves: once its row is shown, the rows were read
	// again after the others left etcd, and they are all there.
	later := e.submit(stuck())
	run(t, ctx, "row of a task submitted after the moves", chromedp.WaitVisible(chromedp.CSS(`tr.st-pending[data-href^="/tasks/`+later.GetId()+`"]`)))
	rows := map[string]string{orders.GetId(): "succeeded", comp.GetId(): "compensated", failed.GetId(): "failed", pending.GetId(): "pending", later.GetId(): "pending"}
	var shown []string
	for id, st := range rows {
		shown = append(shown, `!!document.querySelector('#task-rows tr.st-`+st+`[data-href^="/tasks/`+id+`"]')`)
	}
	poll(t, ctx, "every row in its state in the live list after the moves", strings.Join(shown, " && "), 10*time.Second)
	if n := e.etcdCount("/reeve/tasks/default/" + failed.GetId()); n != 1 {
		t.Errorf("the FAILED task left etcd (%d keys): it stays for the retention, where operators act on it", n)
	}

	// A fresh page: the rows and the counts per state include the archive.
	run(t, ctx, "reload tasks", chromedp.Navigate(e.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#tasks-table")))
	for id, st := range rows {
		run(t, ctx, "row of "+id+" "+st, chromedp.WaitVisible(chromedp.CSS(`tr.st-`+st+`[data-href^="/tasks/`+id+`"]`)))
	}
	for _, st := range []string{"succeeded", "compensated", "failed"} {
		poll(t, ctx, "count of "+st, `[...document.querySelectorAll('#counts a.st-`+st+` b')].some(b => b.textContent === '1')`, 30*time.Second)
	}
	screenshot(t, ctx, dir, "archive-tasks")
	// In the list, the archived rows are marked and cannot be selected; the
	// others can.
	for id, archived := range map[string]bool{orders.GetId(): true, comp.GetId(): true, failed.GetId(): false, pending.GetId(): false} {
		row := `#task-rows tr[data-href^="/tasks/` + id + `"]`
		// 2: marked archived, 1: no selection box.
		got := eval(t, ctx, `(document.querySelector('`+row+` .archived') ? 2 : 0) + (document.querySelector('`+row+` input[name=id]') ? 0 : 1)`)
		if want := map[bool]int{true: 3, false: 0}[archived]; got != want {
			t.Errorf("row of %s: %d (2: marked archived, 1: no selection box), want %d", id, got, want)
		}
	}
	// The overview's recent tasks mark them too.
	run(t, ctx, "open overview", chromedp.Navigate(e.url+"/"), chromedp.WaitVisible(chromedp.CSS(`tr.row[data-href^="/tasks/`+orders.GetId()+`"]`)))
	if n := eval(t, ctx, `document.querySelectorAll('tr.row .archived').length`); n != 2 {
		t.Errorf("overview: %v recent rows marked archived, want the 2 archived tasks", n)
	}
	screenshot(t, ctx, dir, "archive-overview")
	run(t, ctx, "back to tasks", chromedp.Navigate(e.url+"/tasks"), chromedp.WaitVisible(chromedp.CSS("#tasks-table")))

	// Filter by state, from the form: only the archived succeeded task.
	run(t, ctx, "filter succeeded", chromedp.SetValue(chromedp.CSS(`select[name=state]`), "succeeded"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	across(t, ctx, "filtered list", `location.search.includes('state=succeeded') && !!document.querySelector('tr.st-succeeded[data-href^="/tasks/`+orders.GetId()+`"]')`, 30*time.Second)
	if n := eval(t, ctx, `document.querySelectorAll('#task-rows tr.row').length`); n != 1 {
		t.Errorf("state=succeeded lists %d rows, want the one succeeded task: %q", n, text(t, ctx, "#task-rows"))
	}
	screenshot(t, ctx, dir, "archive-filter")

	// The archived tasks' pages: final state, story, timeline, history.
	run(t, ctx, "open archived demo.orders", chromedp.Navigate(e.url+"/tasks/"+orders.GetId()),
		chromedp.WaitVisible(chromedp.CSS("#task-state.st-succeeded")))
	if s := text(t, ctx, "#story"); !strings.Contains(s, "task.succeeded") {
		t.Errorf("archived demo.orders story: want task.succeeded in %q", s)
	}
	tl := text(t, ctx, "#timeline")
	for _, step := range []string{"reserve", "charge", "ship"} {
		if !strings.Contains(tl, step) {
			t.Errorf("archived demo.orders timeline: want step %s in %q", step, tl)
		}
	}
	if h := text(t, ctx, "#history"); !strings.Contains(h, "task.submitted") || !strings.Contains(h, "task.succeeded") {
		t.Errorf("archived demo.orders history: want task.submitted and task.succeeded in %q", h)
	}
	screenshot(t, ctx, dir, "archive-task")
	run(t, ctx, "open archived demo.compensate", chromedp.Navigate(e.url+"/tasks/"+comp.GetId()),
		chromedp.WaitVisible(chromedp.CSS("#task-state.st-compensated")))
	tl = text(t, ctx, "#timeline")
	if ci, ri := strings.Index(tl, "↺ charge"), strings.Index(tl, "↺ reserve"); ci < 0 || ri < 0 || ci > ri {
		t.Errorf("archived demo.compensate timeline: want the compensation of charge before that of reserve, got %q", tl)
	}
	screenshot(t, ctx, dir, "archive-task-compensated")

	// The live stream of an archived task's page sends its final state and
	// stays open (heartbeats), as for any ended task; the API's WatchTask
	// sends the final state and ends.
	if ev := e.firstEvent("/tasks/" + orders.GetId() + "/events?ns=default"); !strings.Contains(ev, "event: task\n") || !strings.Contains(ev, "st-succeeded") {
		t.Errorf("task page stream of an archived task: first event %q, want a task event in state succeeded", ev)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.sched.WatchTask(wctx, &reevev1.WatchTaskRequest{TaskId: orders.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetTask().GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("WatchTask of an archived task: first message %v, %v; want its final state", first.GetTask().GetState(), err)
	}
	if m, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("WatchTask of an archived task: after the final state got %v, %v; want the end of the stream", m, err)
	}

	// A task page open while its task ends and moves: it turns to the final
	// state in place, and stays there once the task left etcd.
	run(t, ctx, "open pending task", chromedp.Navigate(e.url+"/tasks/"+pending.GetId()),
		chromedp.WaitVisible(chromedp.CSS("#task-state.st-pending")))
	eval(t, ctx, `window.__noReload = 1`)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if _, err := e.sched.CancelTask(cctx, &reevev1.CancelTaskRequest{TaskId: pending.GetId(), Reason: "moved on"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "canceled live", chromedp.WaitVisible(chromedp.CSS("#task-state.st-canceled")))
	e.waitArchived(pending.GetId(), reevev1.TaskState_TASK_STATE_CANCELED)
	if eval(t, ctx, `window.__noReload || 0`) != 1 || text(t, ctx, "#task-state") != "canceled" {
		t.Errorf("the page of a task that moved to the archive reloaded or changed: state %q", text(t, ctx, "#task-state"))
	}

	for _, m := range dlg.all() {
		t.Errorf("a dialog opened: %q", m)
	}
	// Leave the page: its event stream stays open while it is shown, and
	// the console's server waits for open requests when the test ends.
	run(t, ctx, "leave", chromedp.Navigate("about:blank"))
}

// etcdCount returns how many keys etcd holds at key.
func (e *env) etcdCount(key string) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.etcd.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Count
}

// firstEvent reads the first event (up to its blank line; the stream's
// retry field and heartbeat comments skipped) of the console's server-sent
// events at path.
func (e *env) firstEvent(path string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	var ev strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && strings.Contains(ev.String(), "event: "):
			return ev.String()
		case line == "", strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
			ev.Reset()
		default:
			ev.WriteString(line + "\n")
		}
	}
	return ev.String()
}

// A FAILED task stays in etcd for the retention, where operators retry or
// compensate it; after the retention it moves to the archive, where it is
// read-only: its page says so and offers no action (the scheduler would
// refuse them), and an action's page refuses too.
func TestBrowserArchivedFailedTaskIsReadOnly(t *testing.T) {
	ctx, dlg := chrome(t, nil)
	e := newArchiveEnvWith(t, []scheduler.Option{scheduler.WithRetention(time.Second), scheduler.WithSweepInterval(100 * time.Millisecond)})
	dir := shots(t)

	failed := e.submit(failing(structpb.NewStringValue("parcel")))
	e.waitState(failed.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	e.waitArchived(failed.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	run(t, ctx, "open the archived FAILED task", chromedp.Navigate(e.url+"/tasks/"+failed.GetId()),
		chromedp.WaitVisible(chromedp.CSS("#task-state.st-failed")))
	if s := text(t, ctx, "#task-archived"); !strings.Contains(s, "read-only") {
		t.Errorf("archived FAILED task page: marker %q, want it to say the task is read-only", s)
	}
	if n := eval(t, ctx, `document.querySelectorAll('#action-compensate, #action-cancel, a[id^="retry-"]').length`); n != 0 {
		t.Errorf("archived FAILED task page offers %v operator actions, want none: %q", n, text(t, ctx, ".task-head"))
	}
	if s := text(t, ctx, "#story"); !strings.Contains(s, "task.failed") {
		t.Errorf("archived FAILED task story: want task.failed in %q", s)
	}
	screenshot(t, ctx, dir, "archive-task-failed")

	for _, action := range []string{"compensate", "retry"} {
		run(t, ctx, "open the "+action+" page", chromedp.Navigate(e.url+"/tasks/"+failed.GetId()+"/"+action+"?ns=default&step=ship"),
			chromedp.WaitVisible(chromedp.CSS(".error-page")))
		if s := text(t, ctx, ".error-msg"); !strings.Contains(s, "archive") || !strings.Contains(s, "read-only") {
			t.Errorf("%s page of an archived task: %q, want a refusal naming the archive", action, s)
		}
	}
	for _, m := range dlg.all() {
		t.Errorf("a dialog opened: %q", m)
	}
}

// Bulk actions leave archived tasks out: they ended and are read-only. The
// tasks list marks an archived row and gives it no selection box; "all
// matching this filter" lists only the tasks still in etcd and says how
// many it left out, and refuses when nothing else matches.
func TestBulkLeavesArchivedTasksOut(t *testing.T) {
	e := newArchiveEnvWith(t, []scheduler.Option{scheduler.WithRetention(time.Second), scheduler.WithSweepInterval(100 * time.Millisecond)})
	failed := e.submit(failing(structpb.NewStringValue("parcel")))
	e.waitState(failed.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	e.waitArchived(failed.GetId(), reevev1.TaskState_TASK_STATE_FAILED)
	b := e.browser()

	_, page := b.get("/tasks?state=failed")
	token := csrf(t, page)
	row := rowOf(t, page, failed.GetId())
	if strings.Contains(row, `name="id"`) || !strings.Contains(row, "archived") {
		t.Errorf("the archived task's row: %q; want it marked archived, with no selection box", row)
	}
	code, body := b.post("/bulk", e.url, url.Values{"csrf": {token}, "action": {"retry"}, "scope": {"filter"}, "filter": {"ns=default&state=failed"}})
	if code != http.StatusConflict || !strings.Contains(body, "archive") || !strings.Contains(body, "read-only") {
		t.Fatalf("bulk retry of every FAILED task, all archived: status %d: %.400s; want 409 naming the archive", code, textOf(body))
	}

	pending := e.submit(stuck())
	_, page = b.get("/tasks")
	if row := rowOf(t, page, pending.GetId()); !strings.Contains(row, `name="id"`) || strings.Contains(row, "archived") {
		t.Errorf("the pending task's row: %q; want a selection box and no archive mark", row)
	}
	code, confirm := b.post("/bulk", e.url, url.Values{"csrf": {token}, "action": {"cancel"}, "scope": {"filter"}, "filter": {"ns=default"}})
	if code != http.StatusOK {
		t.Fatalf("bulk cancel of every task: status %d: %.400s", code, textOf(confirm))
	}
	if !strings.Contains(confirm, `name="id" value="`+pending.GetId()+`"`) || strings.Contains(confirm, `value="`+failed.GetId()+`"`) {
		t.Errorf("confirmation: want the pending task and not the archived one: %.600s", textOf(confirm))
	}
	if !strings.Contains(textOf(confirm), "1 task matching the filter ended and moved to the archive") {
		t.Errorf("confirmation does not say that one archived task was left out: %.600s", textOf(confirm))
	}
}

// rowOf is the tasks list's row of task id in page.
func rowOf(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `data-href="/tasks/`+id+`?`)
	if i < 0 {
		t.Fatalf("no row of %s in the page", id)
	}
	end := strings.Index(page[i:], "</tr>")
	if end < 0 {
		t.Fatalf("row of %s does not end", id)
	}
	return page[i : i+end]
}

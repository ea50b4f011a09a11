package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/testenv"
)

// createSchedule creates a schedule of demo.orders on the env's scheduler.
func (e *env) createSchedule(name string, spec *reevev1.ScheduleSpec) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc := reevev1.NewScheduleServiceClient(testenv.Dial(e.t, e.addr))
	if _, err := sc.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: &reevev1.Schedule{Name: name, Spec: spec,
		Action: &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "demo.orders"}}}}); err != nil {
		e.t.Fatal(err)
	}
}

// The schedules pages show a schedule's next times and its runs with their
// tasks' states; an operator pauses (with a note), resumes and triggers it.
func TestSchedulesPages(t *testing.T) {
	e := newEnv(t)
	e.createSchedule("nightly", &reevev1.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"})
	e.createSchedule("often", &reevev1.ScheduleSpec{Every: durationpb.New(time.Second)})
	b := e.browser()
	code, list := b.get("/schedules")
	if code != http.StatusOK || !strings.Contains(list, "cron 30 2 * * * (Europe/Berlin)") || !strings.Contains(list, "every 1s") {
		t.Fatalf("list: status %d; %.500s", code, textOf(list))
	}
	// The every-second schedule runs; its page shows a succeeded run.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, page := b.get("/schedules/often")
		if strings.Contains(page, `st-succeeded">succeeded`) && strings.Contains(page, "sched-often-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no succeeded run shown: %s", textOf(page[strings.Index(page, "Recent runs"):]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, page := b.get("/schedules/nightly")
	if n := strings.Count(page, `<li class="mono small">`); n != 5 || !strings.Contains(page, "No run yet") {
		t.Fatalf("nightly: %d next times shown, want 5; %.600s", n, textOf(page))
	}
	token := csrf(t, page)
	post := func(action string, form url.Values) string {
		t.Helper()
		form.Set("csrf", token)
		form.Set("ns", "default")
		code, body := b.post("/schedules/nightly/"+action, e.url, form)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d; %.400s", action, code, textOf(body))
		}
		return body
	}
	if body := post("pause", url.Values{"note": {"bank holiday"}}); !strings.Contains(body, `id="schedule-state">paused`) || !strings.Contains(body, "bank holiday") || !strings.Contains(body, `id="action-resume"`) {
		t.Fatalf("after pause: %.600s", textOf(body))
	}
	if body := post("trigger", url.Values{}); !strings.Contains(body, "Started task trig-nightly-") {
		t.Fatalf("after trigger: %.600s", textOf(body))
	}
	if body := post("resume", url.Values{}); !strings.Contains(body, `id="schedule-state">active`) {
		t.Fatalf("after resume: %.600s", textOf(body))
	}
	if code, _ := b.get("/schedules/no-such"); code != http.StatusNotFound {
		t.Fatalf("unknown schedule: status %d, want 404", code)
	}
}

// A read-only console shows no schedule action and refuses one posted.
func TestSchedulesReadOnly(t *testing.T) {
	e := newEnv(t, console.WithReadOnly(true))
	e.createSchedule("nightly", &reevev1.ScheduleSpec{Cron: "@daily"})
	b := e.browser()
	_, page := b.get("/schedules/nightly")
	if strings.Contains(page, `id="schedule-actions"`) {
		t.Error("read-only: the schedule page shows actions")
	}
	if code, _ := b.post("/schedules/nightly/trigger", e.url, url.Values{"csrf": {csrf(t, page)}, "ns": {"default"}}); code != http.StatusForbidden {
		t.Fatalf("read-only trigger: status %d, want 403", code)
	}
}

// In a browser: the schedules page lists a schedule, its page shows its
// next times and runs; an operator pauses it with a note, triggers it
// (confirming the dialog) and resumes it.
func TestBrowserSchedules(t *testing.T) {
	ctx, _ := chrome(t, func(msg string) bool { return strings.HasPrefix(msg, "Start a task of") })
	e := newEnv(t)
	dir := shots(t)
	e.createSchedule("often", &reevev1.ScheduleSpec{Every: durationpb.New(time.Second)})
	e.createSchedule("nightly", &reevev1.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"})
	run(t, ctx, "open schedules", chromedp.Navigate(e.url+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`#schedules a[href^="/schedules/often"]`)))
	screenshot(t, ctx, dir, "schedules")
	run(t, ctx, "open often", chromedp.Click(chromedp.CSS(`#schedules a[href^="/schedules/often"]`)), chromedp.WaitVisible(chromedp.CSS("#schedule-state")))
	// The page does not update itself: reload until a run succeeded.
	for i := 0; ; i++ {
		run(t, ctx, "reload often", chromedp.Navigate(e.url+"/schedules/often"), chromedp.WaitVisible(chromedp.CSS("#runs")))
		if eval(t, ctx, `document.querySelector('#runs .st-succeeded') ? 1 : 0`) == 1 {
			break
		}
		if i == 100 {
			t.Fatal("no succeeded run after 100 reloads")
		}
		time.Sleep(200 * time.Millisecond)
	}
	screenshot(t, ctx, dir, "schedule-runs")
	run(t, ctx, "pause with a note", chromedp.SendKeys(chromedp.CSS(`input[name=note]`), "month end"),
		chromedp.Click(chromedp.CSS("#action-pause")), chromedp.WaitVisible(chromedp.CSS("#action-resume")))
	if note := text(t, ctx, "#schedule-note"); note != "month end" {
		t.Fatalf("note %q, want %q", note, "month end")
	}
	// The pause left its own message ("Paused.") on the page: wait for the
	// trigger's to replace it.
	run(t, ctx, "trigger", chromedp.Click(chromedp.CSS("#action-trigger")))
	across(t, ctx, "the trigger's message", `(document.querySelector('#schedule-message')?.textContent ?? '').startsWith('Started task')`, 20*time.Second)
	if msg := text(t, ctx, "#schedule-message"); !strings.HasPrefix(msg, "Started task trig-often-") {
		t.Fatalf("after trigger: %q", msg)
	}
	screenshot(t, ctx, dir, "schedule-paused-triggered")
	run(t, ctx, "resume", chromedp.Click(chromedp.CSS("#action-resume")), chromedp.WaitVisible(chromedp.CSS("#action-pause")))
}

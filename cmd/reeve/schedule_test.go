package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// A schedule made with the CLI fires through the demo's supervisor, its
// tasks run on the demo agent, and get, list, pause, resume, trigger,
// backfill and delete answer as docs/cli.md says.
func TestScheduleCommands(t *testing.T) {
	addr := demoEnv(t)
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := reeve(t, addr, args...)
		if code != 0 {
			t.Fatalf("reeve %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	get := func() *reevev1.Schedule {
		t.Helper()
		sc := &reevev1.Schedule{}
		if err := protojson.Unmarshal([]byte(run("schedule", "get", "orders", "-o", "json")), sc); err != nil {
			t.Fatal(err)
		}
		return sc
	}
	out := run("schedule", "create", "orders", "--workflow", "demo.orders", "--every", "1s", "--overlap", "allow_all",
		"--catchup-window", "30s", "--input", `{"amount":3}`)
	if !strings.Contains(out, "every 1s") || !strings.Contains(out, "overlap allow_all, catch-up window 30s") {
		t.Fatalf("create printed:\n%s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		sc := get()
		if runs := sc.GetInfo().GetRecentRuns(); len(runs) >= 2 && runs[len(runs)-1].GetTaskState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run succeeded: %v", sc.GetInfo())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := run("schedule", "get", "orders"); !strings.Contains(out, "RECENT RUNS") || !strings.Contains(out, "sched-orders-") || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("get printed:\n%s", out)
	}
	if out := run("schedule", "pause", "orders", "--note", "month end"); !strings.Contains(out, "paused (month end)") {
		t.Fatalf("pause printed:\n%s", out)
	}
	if out := run("schedule", "list"); !strings.Contains(out, "orders") || !strings.Contains(out, "paused") {
		t.Fatalf("list printed:\n%s", out)
	}
	if out := run("schedule", "trigger", "orders"); !strings.Contains(out, "started task trig-orders-") {
		t.Fatalf("trigger printed:\n%s", out)
	}
	from := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Second)
	out = run("schedule", "backfill", "orders", "--from", from.Format(time.RFC3339), "--to", from.Add(2*time.Second).Format(time.RFC3339), "-o", "json")
	var bf struct{ TaskIds []string }
	if err := json.Unmarshal([]byte(out), &bf); err != nil || len(bf.TaskIds) != 3 {
		t.Fatalf("backfill printed %s (%v), want 3 task ids", out, err)
	}
	if out := run("schedule", "resume", "orders"); !strings.Contains(out, "active") {
		t.Fatalf("resume printed:\n%s", out)
	}
	if out := run("schedule", "update", "orders", "--workflow", "demo.orders", "--cron", "@hourly", "--tz", "Europe/Berlin"); !strings.Contains(out, "@hourly") || !strings.Contains(out, "RECENT RUNS") {
		t.Fatalf("update printed:\n%s", out)
	}
	run("schedule", "delete", "orders")
	if code, _, errOut := reeve(t, addr, "schedule", "get", "orders"); code != 1 || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("get after delete: exit %d, %s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "create", "x", "--workflow", "demo.orders"}, "exactly one of --cron and --every"},
		{[]string{"schedule", "create", "x", "--workflow", "demo.orders", "--every", "1m", "--overlap", "sometimes"}, "--overlap"},
		{[]string{"schedule", "backfill", "x", "--from", "yesterday", "--to", "today"}, "--from: not an RFC 3339 time"},
	} {
		if code, _, errOut := reeve(t, addr, tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("reeve %s: exit %d, %q; want exit 2 with %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	if code, _, errOut := reeve(t, addr, "schedule", "create", "x", "--workflow", "demo.orders", "--cron", "61 * * * *"); code != 1 || !strings.Contains(errOut, "schedule.spec.cron") {
		t.Errorf("a bad cron: exit %d, %q; want exit 1 naming schedule.spec.cron", code, errOut)
	}
}

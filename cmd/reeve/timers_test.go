package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/testenv"
)

// A workflow file spells a sleep step `sleep` and the task's deadline
// `taskTimeout`, with Go durations.
func TestWorkflowFileSleepAndTaskTimeout(t *testing.T) {
	file := `name: remind
taskTimeout: 2h
steps:
  - name: wait
    sleep: 10m
  - name: mail
    type: mail.send
    dependsOn: [wait]
`
	w, err := parseWorkflow("wf.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.GetTaskTimeout().AsDuration(); got != 2*time.Hour {
		t.Errorf("taskTimeout %v", got)
	}
	if got := w.GetSteps()[0].GetSleep().AsDuration(); got != 10*time.Minute {
		t.Errorf("sleep %v", got)
	}
}

// `task submit --start-in` makes a task wait to start: `task get` shows its
// start time and deadline and what its step waits for, `task list` marks
// it; a sleep step shows its sleep and when it ends.
func TestSubmitStartInAndTaskGetShowsTimers(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	dir := t.TempDir()
	file := filepath.Join(dir, "wf.yaml")
	if err := os.WriteFile(file, []byte("name: remind\ntaskTimeout: 3h\nsteps:\n  - name: wait\n    sleep: 10m\n  - name: mail\n    type: mail.send\n    dependsOn: [wait]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := reeve(t, s.Addr, "task", "submit", "-f", file, "--id", "later", "--start-in", "1h", "--task-timeout", "2h")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	_, out, _ := reeve(t, s.Addr, "task", "get", "later")
	for _, want := range []string{"STATE:", "PENDING", "STARTS:", "(waiting to start", "DEADLINE:", "the task's start at", "sleep 10m0s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("task get lacks %q:\n%s", want, out)
		}
	}
	if _, out, _ = reeve(t, s.Addr, "task", "list"); !strings.Contains(out, "PENDING (starts ") {
		t.Fatalf("task list does not mark the task waiting to start:\n%s", out)
	}

	code, _, _ = reeve(t, s.Addr, "task", "submit", "-f", file, "--id", "now")
	if code != 0 {
		t.Fatal("submit now")
	}
	_, out, _ = reeve(t, s.Addr, "task", "get", "now")
	if !strings.Contains(out, "WAITING") || !strings.Contains(out, "its sleep to end at") {
		t.Fatalf("task get of a sleeping step:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--start-in", "1h", "--start-at", "2030-01-01T00:00:00Z"}, "--start-in and --start-at exclude each other"},
		{[]string{"--start-at", "tomorrow"}, "--start-at: want an RFC 3339 time"},
		{[]string{"--task-timeout", "0s"}, "--task-timeout: must be positive"},
		{[]string{"--start-in", "400d"}, "start-in"},
		{[]string{"--start-in", "9000h"}, "start_time"},
	} {
		code, _, errOut := reeve(t, s.Addr, append([]string{"task", "submit", "-f", file}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to name %q", c.args, code, errOut, c.want)
		}
	}
}

package main

import (
	"strings"
	"testing"
)

// The queue commands set, show, pause and clear a step type's limits as
// docs/cli.md says; flag mistakes exit 2, bad values 1 naming the field.
func TestQueueCommands(t *testing.T) {
	addr := demoEnv(t)
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := reeve(t, addr, args...)
		if code != 0 {
			t.Fatalf("reeve %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	if out := run("queue", "limit", "payments.charge", "--max-running", "10", "--rate", "100", "--burst", "20"); !strings.Contains(out, "payments.charge: max-running 10, rate 100/s burst 20, paused false") {
		t.Fatalf("limit printed:\n%s", out)
	}
	if out := run("queue", "pause", "payments.charge"); !strings.Contains(out, "paused true") {
		t.Fatalf("pause printed:\n%s", out)
	}
	out := run("queue", "list")
	if !strings.Contains(out, "TYPE") || !strings.Contains(out, "OLDEST WAIT") {
		t.Fatalf("list printed:\n%s", out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "payments.charge ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 9 || f[3] != "10" || f[4] != "100/s" || f[7] != "true" {
		t.Fatalf("list's payments.charge line %q in:\n%s", line, out)
	}
	run("queue", "resume", "payments.charge")
	if out := run("queue", "limit", "payments.charge", "--clear"); !strings.Contains(out, "max-running -, rate -, paused false") {
		t.Fatalf("clear printed:\n%s", out)
	}
	if code, _, _ := reeve(t, addr, "queue", "limit", "payments.charge", "--clear", "--max-running", "3"); code != 2 {
		t.Errorf("--clear with a limit: exit %d, want 2", code)
	}
	if code, _, _ := reeve(t, addr, "queue", "limit", "payments.charge"); code != 2 {
		t.Errorf("no limit: exit %d, want 2", code)
	}
	if code, _, errOut := reeve(t, addr, "queue", "limit", "payments.charge", "--max-running", "-1"); code != 1 || !strings.Contains(errOut, "max_running") {
		t.Errorf("negative max-running: exit %d, %s; want 1 naming max_running", code, errOut)
	}
}

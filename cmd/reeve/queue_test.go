package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
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

// task get says why a queued step waits: its type is paused.
func TestTaskGetSaysWhyPaused(t *testing.T) {
	addr := demoEnv(t)
	code, _, errOut := reeve(t, addr, "queue", "pause", "inventory.reserve")
	if code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	// Applied by the scheduler (its watch delivered the pause).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, out, _ := reeve(t, addr, "queue", "list", "-o", "json")
		resp := &reevev1.ListQueuesResponse{}
		if err := protojson.Unmarshal([]byte(out), resp); err != nil {
			t.Fatal(err)
		}
		applied := false
		for _, q := range resp.GetQueues() {
			applied = applied || (q.GetType() == "inventory.reserve" && q.GetConfig().GetPaused() && q.GetApplied())
		}
		if applied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause not applied: %s", out)
		}
	}
	code, out, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.orders", "--id", "held", "--input", `{"order_id":"held"}`)
	if code != 0 {
		t.Fatalf("submit: exit %d: %s %s", code, out, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, _ = reeve(t, addr, "task", "get", "held")
		if strings.Contains(out, "waiting: queue inventory.reserve is paused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task get printed:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

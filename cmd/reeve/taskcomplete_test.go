package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/testenv"
)

// The CLI's contract for completions from outside: `reeve task complete
// TASK_ID STEP --result JSON`, `--token TOKEN`, `--error CODE --message
// TEXT`; task get and list show the waiting step.
func TestContractTaskComplete(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	addr := s.Addr
	dir := t.TempDir()
	wf := filepath.Join(dir, "approval.yaml")
	if err := os.WriteFile(wf, []byte("name: approval\nsteps:\n  - name: approve\n    waitFor: external\n    timeout: 48h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if code, _, errOut := reeve(t, addr, "task", "submit", "-f", wf, "--id", id); code != 0 {
			t.Fatalf("submit: exit %d: %s", code, errOut)
		}
	}
	// Shown waiting: get and list.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, _ := reeve(t, addr, "task", "get", "t1")
		if strings.Contains(out, "WAITING") {
			if !strings.Contains(out, "a completion from outside since") || !strings.Contains(out, "(external)") {
				t.Fatalf("task get:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never waiting:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, out, _ := reeve(t, addr, "task", "list"); !strings.Contains(out, "RUNNING (waiting: approve)") {
		t.Fatalf("task list:\n%s", out)
	}

	if code, out, errOut := reeve(t, addr, "task", "waiting"); code != 0 || strings.Count(out, "approve") != 3 || !strings.Contains(out, "external") {
		t.Fatalf("task waiting: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut := reeve(t, addr, "task", "complete", "t1", "approve", "--result", `{"by":"ann"}`)
	if code != 0 || !strings.Contains(out, "completed: SUCCEEDED") {
		t.Fatalf("complete by name: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = reeve(t, addr, "task", "complete", "t1", "approve", "--result", `{"by":"ann"}`, "-o", "json")
	var resp struct {
		Repeated bool   `json:"repeated"`
		State    string `json:"state"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || !resp.Repeated || resp.State != "STEP_STATE_SUCCEEDED" {
		t.Fatalf("the same completion again: exit %d: %s", code, out)
	}
	if code, _, errOut := reeve(t, addr, "task", "complete", "t1", "approve", "--error", "rejected"); code == 0 || !strings.Contains(errOut, "STEP_COMPLETED_OTHERWISE") && !strings.Contains(errOut, "already completed") {
		t.Fatalf("another completion: exit %d: %s", code, errOut)
	}

	code, tok, errOut := reeve(t, addr, "task", "token", "t2", "approve")
	if code != 0 || !strings.HasPrefix(tok, "rvt1.") {
		t.Fatalf("token: exit %d: %s%s", code, tok, errOut)
	}
	if code, out, errOut := reeve(t, addr, "task", "complete", "--token", strings.TrimSpace(tok), "--result", "true"); code != 0 {
		t.Fatalf("complete by token: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := reeve(t, addr, "task", "complete", "t3", "approve", "--error", "rejected", "--message", "over budget"); code != 0 || !strings.Contains(out, "FAILED") {
		t.Fatalf("complete with an error: exit %d: %s%s", code, out, errOut)
	}
	_, out, _ = reeve(t, addr, "task", "get", "t3")
	if !strings.Contains(out, "FAILED") || !strings.Contains(out, "rejected: over budget") {
		t.Fatalf("task get t3:\n%s", out)
	}

	// Usage errors.
	for _, args := range [][]string{
		{"task", "complete", "t1", "approve"},
		{"task", "complete", "t1", "approve", "--result", "{", "--error", "x"},
		{"task", "complete", "t1", "--result", "1"},
		{"task", "complete", "--token", "x", "t1", "approve", "--result", "1"},
		{"task", "complete", "t1", "approve", "--result", "1", "--message", "m"},
		{"task", "complete", "t1", "approve", "--result", "{"},
	} {
		if code, _, errOut := reeve(t, addr, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
}

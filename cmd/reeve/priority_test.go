package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reeve-org/reeve/internal/testenv"
)

// `task submit --priority N --fairness-key K` (issue 36): kept on the task,
// printed by `task get` and marked in `task list`; a task without them
// prints neither; a priority out of range is refused naming the field.
func TestTaskSubmitPriority(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	wf := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(wf, []byte(`{"name":"p","steps":[{"name":"x","type":"nobody"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := reeve(t, s.Addr, "task", "submit", "-f", wf, "--id", "hi", "--priority", "1", "--fairness-key", "tenant-a"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeve(t, s.Addr, "task", "submit", "-f", wf, "--id", "plain"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeve(t, s.Addr, "task", "submit", "-f", wf, "--priority", "7"); code == 0 || !strings.Contains(errOut, "priority") {
		t.Fatalf("submit --priority 7: exit %d: %s, want a refusal naming priority", code, errOut)
	}
	_, out, _ := reeve(t, s.Addr, "task", "get", "hi")
	if !strings.Contains(out, "PRIORITY:") || !strings.Contains(out, "FAIRNESS KEY:") || !strings.Contains(out, "tenant-a") {
		t.Errorf("task get hi:\n%s\nwant PRIORITY: 1 and FAIRNESS KEY: tenant-a", out)
	}
	_, out, _ = reeve(t, s.Addr, "task", "get", "plain")
	if strings.Contains(out, "PRIORITY") || strings.Contains(out, "FAIRNESS") {
		t.Errorf("task get plain prints a priority or key it does not have:\n%s", out)
	}
	_, out, _ = reeve(t, s.Addr, "task", "list")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "hi ") && !strings.Contains(line, "(priority 1)") || strings.HasPrefix(line, "plain ") && strings.Contains(line, "priority") {
			t.Errorf("task list row %q", line)
		}
	}
}

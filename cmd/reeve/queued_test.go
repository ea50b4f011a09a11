package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A step no agent handles shows as queued, saying that no agent serves its
// type (and what agents serve), with the time the supervisor takes over.
func TestTaskGetShowsQueuedStep(t *testing.T) {
	addr := demoEnv(t)
	wf := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(wf, []byte(`{"name":"nobody","steps":[{"name":"x","type":"nobody.handles.this","scheduleToStartTimeout":"3600s"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := reeve(t, addr, "task", "submit", "-f", wf, "--id", "q1"); code != 0 {
		t.Fatalf("submit exit %d: %s", code, errOut)
	}
	code, out, errOut := reeve(t, addr, "task", "get", "q1")
	if code != 0 {
		t.Fatalf("get exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "WAITING-FOR") || !strings.Contains(out, "no agent serves nobody.handles.this; ") || !strings.Contains(out, "; supervisor acts at ") {
		t.Fatalf("task get does not show the queued step:\n%s", out)
	}
}

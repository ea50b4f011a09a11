package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// A submission refused for the submit rate carries a RetryInfo delay; the
// CLI waits that long and sends it again instead of failing.
func TestCLIHonoursRetryInfo(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithSubmitRate(0.5, 1))
	wf := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(wf, []byte(`{"name":"r","steps":[{"name":"a","type":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := reeve(t, s.Addr, "task", "submit", "-f", wf); code != 0 {
		t.Fatalf("first submit: exit %d, %s %s", code, out, stderr)
	}
	start := time.Now()
	code, out, stderr := reeve(t, s.Addr, "task", "submit", "-f", wf)
	if code != 0 {
		t.Fatalf("second submit, over the rate: exit %d, stdout %s, stderr %s; want it retried after the scheduler's delay", code, out, stderr)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("second submit succeeded after %v: it was not refused, the test proves nothing", waited)
	}
}

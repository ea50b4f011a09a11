package cluster

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// RefusedCalls finds the "call refused" lines a scheduler logs (slog text,
// as `reeve scheduler` logs by default) and tells the agents' refused
// workflow registrations from the others.
func TestRefusedCallsReadsTheSchedulersLogs(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cfg: Config{Dir: dir, Secure: true}}
	p := c.process("scheduler-1", "reeve", "")
	c.Schedulers = []*Process{p}
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f, nil)).With("component", "auth")
	log.Info("scheduler listening", "address", "127.0.0.1:1")
	log.Warn("call refused", "method", "/reeve.v1.SchedulerService/RegisterWorkflow", "caller", "cert:agent", "peer", "127.0.0.1:2",
		"code", "PermissionDenied", "reason", "/reeve.v1.SchedulerService/RegisterWorkflow: cert:agent has none of the roles [admin]")
	log.Warn("call refused", "method", "/reeve.v1.SupervisorService/RecoverSteps", "caller", "cert:supervisor", "peer", "127.0.0.1:3",
		"code", "PermissionDenied", "reason", "/reeve.v1.SupervisorService/RecoverSteps: method not allowed")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	calls, err := c.RefusedCalls()
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		scheduler, method, caller string
		expected                  bool
	}
	want := []got{
		{"scheduler-1", "/reeve.v1.SchedulerService/RegisterWorkflow", "cert:agent", true},
		{"scheduler-1", "/reeve.v1.SupervisorService/RecoverSteps", "cert:supervisor", false},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d refused calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, r := range calls {
		if g := (got{r.Scheduler, r.Method, r.Caller, r.Expected()}); g != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, g, want[i])
		}
	}
}

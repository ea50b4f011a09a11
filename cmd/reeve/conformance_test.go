package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/conformance"
	"github.com/reeve-org/reeve/internal/testenv"
)

type conformanceReport struct {
	AgentID string `json:"agent_id"`
	Passed  bool   `json:"passed"`
	Cases   []struct {
		Name, Result string
		Failures     []string
	} `json:"cases"`
}

// The contract: -o json prints the report, exit 0 when every case passed.
// The suite listens on port 0 and prints its address; the agent connects
// there once it is printed.
func TestConformanceJSONAgainstSDKAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"conformance", "--listen", "127.0.0.1:0", "--run", "^(register|assignment|redelivery)$", "-o", "json"},
			&stdout, &stderr, func(string) string { return "" })
	}()
	addrLine := regexp.MustCompile(`serving the agent protocol on (\S+);`)
	var addr string
	waitUntil(t, 30*time.Second, "the suite to print its address", func() bool {
		select {
		case code := <-done:
			t.Fatalf("exit %d before it listened\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
		default:
		}
		if m := addrLine.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	a, err := agentsdk.New([]string{addr}, agentsdk.WithAgentID("cli-go"), agentsdk.WithLogger(testenv.Logger()), agentsdk.WithReconnectBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	conformance.Handle(a)
	actx, stop := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() { _ = a.Run(actx); close(agentDone) }()
	t.Cleanup(func() { stop(); <-agentDone })

	code := <-done
	out, errOut := stdout.String(), stderr.String()
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var rep conformanceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if !rep.Passed || rep.AgentID != "cli-go" || len(rep.Cases) != 3 || rep.Cases[2].Name != "redelivery" || rep.Cases[2].Result != "PASS" {
		t.Fatalf("report %+v", rep)
	}
}

// An agent command that dies before connecting fails at once with exit 1,
// without waiting for the connect timeout.
func TestConformanceAgentExits(t *testing.T) {
	start := time.Now()
	code, out, errOut := reeve(t, "unused", "conformance", "--connect-timeout", "20s", "--", "sh", "-c", "echo agent starting >&2; exit 3")
	if code != exitError {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitError, out, errOut)
	}
	if !strings.Contains(out, "register") || !strings.Contains(out, "exited") || !strings.Contains(out, "FAIL: 0 passed") {
		t.Fatalf("table:\n%s", out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

// --agent runs a command line through sh, like -- runs an argv.
func TestConformanceAgentFlag(t *testing.T) {
	code, out, errOut := reeve(t, "unused", "conformance", "--run", "^register$", "--agent", "echo from-sh-c >&2; exit 4")
	if code != exitError || !strings.Contains(errOut, "from-sh-c") || !strings.Contains(out, "exited") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, _, errOut = reeve(t, "unused", "conformance", "--agent", "true", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "exclusive") {
		t.Fatalf("both --agent and --: exit %d: %s", code, errOut)
	}
}

func TestConformanceBadRun(t *testing.T) {
	for _, run := range []string{"(", "^no-such-case$"} {
		code, _, errOut := reeve(t, "unused", "conformance", "--run", run)
		if code != exitUsage || !strings.Contains(errOut, "--run") {
			t.Fatalf("--run %q: exit %d: %s", run, code, errOut)
		}
	}
}

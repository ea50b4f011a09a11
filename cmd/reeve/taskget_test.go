package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// `task get` marks a running step whose agent is no longer connected: the
// agent's id alone while it is connected, "(disconnected)" once its stream
// ended (the execution is recovered only at its complete-by).
func TestTaskGetMarksAStepWhoseAgentDisconnected(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wf := &reevev1.Workflow{Name: "slow", Steps: []*reevev1.StepSpec{{Name: "work", Type: "slow.work", Timeout: durationpb.New(time.Hour)}}}
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}}); err != nil {
		t.Fatal(err)
	}
	agent := testenv.ConnectRaw(t, s.Addr, &reevev1.Register{AgentId: "worker-1", StepTypes: []string{"slow.work"}, MaxConcurrentSteps: 1})
	agent.NextAssignment(20 * time.Second)
	// The scheduler records the agent in etcd (what ListAgents reads) just
	// after it may dispatch to it.
	waitAgentListed(t, s.Addr, "worker-1")

	agentCell := func() string {
		t.Helper()
		code, out, errOut := reeve(t, s.Addr, "task", "get", "t-1")
		if code != 0 {
			t.Fatalf("task get: exit %d: %s", code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "work ") {
				return line
			}
		}
		t.Fatalf("no step row in:\n%s", out)
		return ""
	}
	if row := agentCell(); !strings.Contains(row, "worker-1") || strings.Contains(row, "disconnected") {
		t.Fatalf("connected agent: row %q, want worker-1 unmarked", row)
	}

	agent.Close()
	for {
		resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetAgents()) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the closed agent is still listed")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if row := agentCell(); !strings.Contains(row, "worker-1 (disconnected)") || !strings.Contains(row, "RUNNING") {
		t.Fatalf("disconnected agent: row %q, want RUNNING held by worker-1 (disconnected)", row)
	}
}

// A compensated step shows its compensation's type and the compensation's
// own attempt, not its forward type and the step's attempt counter; a
// workflow's step without an escalation shows the default it gets.
func TestTaskGetShowsACompensationAsSuch(t *testing.T) {
	addr := demoEnv(t)
	if code, _, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.compensate", "--id", "undo-1", "--wait"); code != exitTaskNotSucceeded {
		t.Fatalf("submit: exit %d, want %d: %s", code, exitTaskNotSucceeded, errOut)
	}
	code, out, errOut := reeve(t, addr, "task", "get", "undo-1")
	if code != 0 {
		t.Fatalf("task get: exit %d: %s", code, errOut)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			rows[f[0]] = f
		}
	}
	for step, typ := range map[string]string{"reserve": "inventory.release", "charge": "payments.refund"} {
		want := []string{step, typ, "(compensation)", "COMPENSATED", "1"}
		if got := rows[step]; len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("row of %s: %q, want it to start %q\n%s", step, got, want, out)
		}
	}

	code, out, errOut = reeve(t, addr, "workflow", "get", "demo.compensate")
	if code != 0 || strings.Contains(out, "UNSPECIFIED") || !strings.Contains(out, "COMPENSATE (default)") {
		t.Fatalf("workflow get: exit %d, want COMPENSATE (default) for steps without an escalation, never UNSPECIFIED:\n%s%s", code, out, errOut)
	}
}

// A step whose type no connected agent serves says so from the start, with
// the nearest type agents serve: in task get, and as a warning of workflow
// register (which still succeeds).
func TestStepNoAgentServesIsNamed(t *testing.T) {
	s := testenv.New(t).StartScheduler("")
	agent := testenv.ConnectRaw(t, s.Addr, &reevev1.Register{AgentId: "onboarder", MaxConcurrentSteps: 4,
		StepTypes: []string{"onboard.create_account", "onboard.create_billing_customr", "onboard.send_welcome"}})
	waitAgentListed(t, s.Addr, "onboarder")
	file := filepath.Join(t.TempDir(), "onboard.yaml")
	if err := os.WriteFile(file, []byte(`name: onboard
steps:
  - {name: create_account, type: onboard.create_account, timeout: 1m}
  - {name: create_billing, type: onboard.create_billing_customer, dependsOn: [create_account], timeout: 1m}
  - {name: send_welcome, type: onboard.send_welcome, dependsOn: [create_billing], timeout: 1m}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "no agent serves onboard.create_billing_customer; agents serve onboard.create_billing_customr"
	code, _, errOut := reeve(t, s.Addr, "workflow", "register", "-f", file)
	if code != 0 || !strings.Contains(errOut, `reeve: warning: step "create_billing": `+want) || strings.Contains(errOut, `"create_account"`) {
		t.Fatalf("workflow register: exit %d, stderr %q; want exit 0 and a warning for create_billing only", code, errOut)
	}
	if code, _, errOut := reeve(t, s.Addr, "task", "submit", "--workflow", "onboard", "--id", "t-1"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	first := agent.NextAssignment(20 * time.Second)
	agent.Succeed(first.GetRef(), map[string]any{"account": "a-1"})
	for i := 0; ; i++ {
		code, out, errOut := reeve(t, s.Addr, "task", "get", "t-1")
		if code != 0 {
			t.Fatalf("task get: exit %d: %s", code, errOut)
		}
		if strings.Contains(out, want) {
			break
		}
		if i == 200 {
			t.Fatalf("task get after 200 tries does not say %q:\n%s", want, out)
		}
	}
}

// waitAgentListed waits, bounded, until reeve agents list shows agent id.
func waitAgentListed(t *testing.T, addr, id string) {
	t.Helper()
	for i := 0; ; i++ {
		code, out, _ := reeve(t, addr, "agents", "list")
		if code == 0 && strings.Contains(out, id) {
			return
		}
		if i == 200 {
			t.Fatalf("agents list after 200 tries lacks %s:\n%s", id, out)
		}
	}
}

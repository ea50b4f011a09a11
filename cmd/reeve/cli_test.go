package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/testenv"
)

// demoEnv starts etcd, a scheduler with the demo workflows and a demo agent.
func demoEnv(t *testing.T) string {
	t.Helper()
	env := testenv.New(t)
	s := env.StartScheduler("")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, w := range demo.Workflows() {
		if _, err := s.SchedulerService().RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
			t.Fatal(err)
		}
	}
	env.StartSupervisor([]*testenv.Scheduler{s})
	a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	demo.Register(a)
	actx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(actx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	return s.Addr
}

// reeve runs the CLI against addr and returns its exit code and output.
func reeve(t *testing.T, addr string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := func(k string) string {
		if k == "REEVE_ADDRESS" {
			return addr
		}
		return ""
	}
	code = run(ctx, args, &out, &errOut, env)
	return code, out.String(), errOut.String()
}

func TestContractSubmitWaitJSON(t *testing.T) {
	addr := demoEnv(t)
	code, out, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.orders", "--input", `{"order_id":"o-1"}`, "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var task struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Steps []struct {
			Name, State string
			Output      map[string]any
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if task.State != "TASK_STATE_SUCCEEDED" || len(task.Steps) != 3 || task.Steps[1].Output["charge_id"] != "ch-o-1" {
		t.Fatalf("final task %+v", task)
	}

	code, out, _ = reeve(t, addr, "task", "get", task.ID)
	for _, want := range []string{"STATE:      SUCCEEDED", "STEPS", "HISTORY", "step.dispatched", "agent/"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("task get (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	code, out, _ = reeve(t, addr, "task", "list", "--state", "succeeded")
	if code != 0 || !strings.Contains(out, task.ID) {
		t.Fatalf("task list (exit %d) lacks %s:\n%s", code, task.ID, out)
	}
}

func TestCompensationDemoShowsUndoneSteps(t *testing.T) {
	addr := demoEnv(t)
	code, out, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.compensate", "--id", "comp-1", "--wait", "--exit-code=false", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"TASK_STATE_COMPENSATED"`) || strings.Count(out, `"STEP_STATE_COMPENSATED"`) != 2 {
		t.Fatalf("want a COMPENSATED task with two compensated steps:\n%s", out)
	}
	// --wait exits 3 for a task that did not succeed, with or without
	// --exit-code (the default).
	for _, args := range [][]string{{"--id", "comp-2", "--wait", "--exit-code"}, {"--id", "comp-3", "--wait"}} {
		if code, _, _ := reeve(t, addr, append([]string{"task", "submit", "--workflow", "demo.compensate"}, args...)...); code != 3 {
			t.Fatalf("submit %v of a compensated task: exit %d, want 3", args, code)
		}
	}
}

func TestWorkflowRegisterFromYAMLAndRunInline(t *testing.T) {
	addr := demoEnv(t)
	dir := t.TempDir()
	yamlFile := filepath.Join(dir, "wf.yaml")
	if err := os.WriteFile(yamlFile, []byte("name: shipping\nsteps:\n  - name: ship\n    type: shipping.ship\n    timeout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := reeve(t, addr, "workflow", "register", "-f", yamlFile, "-o", "json")
	if code != 0 || !strings.Contains(out, `"version":  1`) && !strings.Contains(out, `"version": 1`) {
		t.Fatalf("register exit %d: %s %s", code, out, errOut)
	}
	if code, out, _ := reeve(t, addr, "workflow", "get", "shipping"); code != 0 || !strings.Contains(out, "shipping.ship") {
		t.Fatalf("workflow get exit %d:\n%s", code, out)
	}
	code, out, errOut = reeve(t, addr, "task", "submit", "-f", yamlFile, "--input", `{"order_id":"x"}`, "--wait")
	if code != 0 || !strings.Contains(out, "STATE:      SUCCEEDED") {
		t.Fatalf("inline submit exit %d: %s %s", code, out, errOut)
	}
}

func TestErrorsAndExitCodes(t *testing.T) {
	addr := demoEnv(t)
	bad := filepath.Join(t.TempDir(), "typo.json")
	if err := os.WriteFile(bad, []byte(`{"name":"x","stepz":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown task", []string{"task", "get", "nope"}, 1, `task "nope" in namespace "default" not found (NotFound)`},
		{"no workflow flag", []string{"task", "submit"}, 2, "exactly one of --workflow or -f"},
		{"both workflow flags", []string{"task", "submit", "--workflow", "a", "-f", bad}, 2, "exactly one of --workflow or -f"},
		{"bad input", []string{"task", "submit", "--workflow", "demo.orders", "--input", "{nope"}, 2, "--input: not valid JSON"},
		{"unknown field in file", []string{"workflow", "register", "-f", bad}, 2, "stepz"},
		{"bad state", []string{"task", "list", "--state", "sleeping"}, 2, "--state: unknown task state"},
		{"missing argument", []string{"task", "get"}, 2, "accepts 1 arg"},
		{"unknown flag", []string{"task", "list", "--bogus"}, 2, "unknown flag"},
		{"unknown command", []string{"task", "frobnicate"}, 2, "unknown command"},
		{"bad output", []string{"task", "list", "-o", "xml"}, 2, "--output"},
		{"invalid name", []string{"task", "submit", "--workflow", "no spaces"}, 1, "workflow_ref.name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := reeve(t, addr, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d containing %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestWatchPrintsOneJSONObjectPerChange(t *testing.T) {
	addr := demoEnv(t)
	if code, _, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.orders", "--id", "w1", "--input", `{"order_id":"w"}`); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := reeve(t, addr, "task", "watch", "w1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct{ State string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.State != "TASK_STATE_SUCCEEDED" {
		t.Fatalf("last line %q (%v), want the SUCCEEDED task", lines[len(lines)-1], err)
	}
}

func TestParseTaskFile(t *testing.T) {
	w, err := parseWorkflow("x.json", []byte(`{"name":"n","steps":[{"name":"a","type":"t","dependsOn":[],"timeout":"2s"}]}`))
	if err != nil || w.GetSteps()[0].GetTimeout().AsDuration() != 2*time.Second {
		t.Fatalf("json: %v %v", w, err)
	}
	if _, err := parseWorkflow("x.toml", nil); err == nil {
		t.Fatal("a .toml file was accepted")
	}
	for _, s := range []string{"running", "RUNNING", "TASK_STATE_RUNNING"} {
		if st, err := parseTaskState(s); err != nil || st != reevev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("parseTaskState(%q) = %v, %v", s, st, err)
		}
	}
}

func TestTimeoutDemoIsRetriedBySupervisor(t *testing.T) {
	addr := demoEnv(t)
	code, out, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.timeout", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var task struct {
		State string
		Steps []struct {
			Attempt      int
			FailureCount int
		}
		History []struct{ Kind, Actor string }
	}
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatal(err)
	}
	expiredBySupervisor := false
	for _, h := range task.History {
		expiredBySupervisor = expiredBySupervisor || h.Kind == "step.expired" && strings.HasPrefix(h.Actor, "supervisor/")
	}
	if task.State != "TASK_STATE_SUCCEEDED" || task.Steps[0].Attempt != 2 || task.Steps[0].FailureCount != 1 || !expiredBySupervisor {
		t.Fatalf("task %+v, want SUCCEEDED at attempt 2 with failure count 1 after a supervisor expiry", task)
	}
}

func TestOperatorAlertsAndRetry(t *testing.T) {
	addr := demoEnv(t)
	wf := filepath.Join(t.TempDir(), "fragile.json")
	// inventory.release succeeds, shipping.ship_fail fails permanently with
	// the default escalation: fail.
	def := `{"name":"fragile","steps":[{"name":"reserve","type":"inventory.reserve"},{"name":"ship","type":"shipping.ship_fail","dependsOn":["reserve"]}]}`
	if err := os.WriteFile(wf, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := reeve(t, addr, "task", "submit", "-f", wf, "--id", "fr-1", "--wait"); code != 3 || !strings.Contains(out, "STATE:      FAILED") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	code, out, _ := reeve(t, addr, "alerts", "list", "-o", "json")
	var alerts struct {
		Alerts []struct{ ID, TaskID, Step string }
	}
	if err := json.Unmarshal([]byte(out), &alerts); code != 0 || err != nil || len(alerts.Alerts) != 1 || alerts.Alerts[0].TaskID != "fr-1" || alerts.Alerts[0].Step != "ship" {
		t.Fatalf("alerts list (exit %d): %s", code, out)
	}
	if code, out, errOut := reeve(t, addr, "alerts", "ack", alerts.Alerts[0].ID, "--by", "ops"); code != 0 || !strings.Contains(out, "by ops") {
		t.Fatalf("ack exit %d: %s %s", code, out, errOut)
	}
	if _, out, _ := reeve(t, addr, "alerts", "list"); strings.Contains(out, "fr-1") {
		t.Fatalf("acknowledged alert still listed:\n%s", out)
	}
	// The operator retries the failed step (it fails again: a new alert).
	if code, out, errOut := reeve(t, addr, "task", "retry", "fr-1", "ship", "--reason", "carrier says try again"); code != 0 || !strings.Contains(out, "step.retried_by_operator") {
		t.Fatalf("retry exit %d: %s %s", code, out, errOut)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, out, _ := reeve(t, addr, "task", "get", "fr-1"); strings.Contains(out, "STATE:      FAILED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the retried step did not fail again")
		}
	}
	if code, out, _ := reeve(t, addr, "task", "compensate", "fr-1"); code != 0 || !strings.Contains(out, "STATE:      COMPENSAT") {
		t.Fatalf("compensate exit %d: %s", code, out)
	}
	// The compensation resolved the alert of the second failure; the first
	// keeps its acknowledgement.
	if _, out, _ := reeve(t, addr, "alerts", "list"); strings.Contains(out, "fr-1") {
		t.Fatalf("an alert of the compensated task is still open:\n%s", out)
	}
	if _, out, _ := reeve(t, addr, "alerts", "list", "--all"); !strings.Contains(out, "by ops") || !strings.Contains(out, "resolved: compensate_task by operator") ||
		!strings.Contains(out, `step "ship" failed permanently: carrier rejected the parcel`) {
		t.Fatalf("alerts list --all: want the first acknowledged by ops, the second resolved by the compensation, the cause in the reason:\n%s", out)
	}
}

// The operator's pause, resume, rerun and batch commands (issue 37).
func TestOperatorPauseRerunAndBatch(t *testing.T) {
	addr := demoEnv(t)
	dir := t.TempDir()
	write := func(name, def string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(def), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fragile := write("fragile.json", `{"name":"fragile","steps":[{"name":"reserve","type":"inventory.reserve"},{"name":"ship","type":"shipping.ship_fail","dependsOn":["reserve"]}]}`)
	idle := write("idle.json", `{"name":"idle","steps":[{"name":"wait","type":"nobody.serves.this"}]}`)

	if code, out, errOut := reeve(t, addr, "task", "submit", "-f", fragile, "--id", "fr-2", "--wait"); code != 3 {
		t.Fatalf("submit exit %d: %s %s", code, out, errOut)
	}
	code, out, errOut := reeve(t, addr, "task", "rerun", "fr-2", "--from", "ship", "-o", "json")
	var rerun struct{ ID, RerunOf string }
	if err := json.Unmarshal([]byte(out), &rerun); code != 0 || err != nil || rerun.RerunOf != "fr-2" || rerun.ID == "" {
		t.Fatalf("rerun exit %d: %s %s", code, out, errOut)
	}

	if code, out, errOut := reeve(t, addr, "task", "submit", "-f", idle, "--id", "p-1"); code != 0 {
		t.Fatalf("submit exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := reeve(t, addr, "task", "pause", "p-1", "--reason", "supplier down"); code != 0 || !strings.Contains(out, "(paused") {
		t.Fatalf("pause exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := reeve(t, addr, "task", "resume", "p-1"); code != 0 || strings.Contains(out, "(paused") {
		t.Fatalf("resume exit %d: %s %s", code, out, errOut)
	}

	code, out, errOut = reeve(t, addr, "batch", "cancel", "--prefix", "p-", "--reason", "cleanup", "-o", "json")
	var job struct{ ID string }
	if err := json.Unmarshal([]byte(out), &job); code != 0 || err != nil || job.ID == "" {
		t.Fatalf("batch cancel exit %d: %s %s", code, out, errOut)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, out, _ := reeve(t, addr, "batch", "get", job.ID); strings.Contains(out, "SUCCEEDED") {
			if !strings.Contains(out, "1 matched: 1 applied") {
				t.Fatalf("batch get:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch job did not end")
		}
	}
	if _, out, _ := reeve(t, addr, "batch", "list"); !strings.Contains(out, job.ID) {
		t.Fatalf("batch list lacks %s:\n%s", job.ID, out)
	}
	if _, out, _ := reeve(t, addr, "task", "get", "p-1"); !strings.Contains(out, "CANCELED") {
		t.Fatalf("p-1 after the batch:\n%s", out)
	}
}

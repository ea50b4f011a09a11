package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAgentListTableAndJSON(t *testing.T) {
	addr := demoEnv(t)
	// The demo agent connects in the background: wait for it, bounded.
	var out string
	for i := 0; ; i++ {
		code, o, errOut := reeve(t, addr, "agent", "list", "-o", "json")
		if code != 0 {
			t.Fatalf("agent list -o json: exit %d: %s", code, errOut)
		}
		var resp struct {
			Agents []struct {
				AgentID            string   `json:"agentId"`
				StepTypes          []string `json:"stepTypes"`
				MaxConcurrentSteps int      `json:"maxConcurrentSteps"`
				Credits            int      `json:"credits"`
				SchedulerID        string   `json:"schedulerId"`
				ConnectedSince     string   `json:"connectedSince"`
			} `json:"agents"`
			Queues []struct {
				StepType string `json:"stepType"`
			} `json:"queues"`
		}
		if err := json.Unmarshal([]byte(o), &resp); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, o)
		}
		if len(resp.Agents) == 1 {
			a := resp.Agents[0]
			if a.AgentID == "" || len(a.StepTypes) == 0 || a.MaxConcurrentSteps == 0 || a.Credits != a.MaxConcurrentSteps || a.SchedulerID == "" || a.ConnectedSince == "" || len(resp.Queues) != len(a.StepTypes) {
				t.Fatalf("agent list: %s", o)
			}
			out = a.AgentID
			break
		}
		if i == 200 {
			t.Fatalf("agent list after 200 tries: %s", o)
		}
		reeve(t, addr, "task", "list") // a round trip as a pause, instead of a sleep
	}
	for _, cmd := range []string{"agent", "agents"} {
		code, table, errOut := reeve(t, addr, cmd, "list")
		for _, want := range []string{"AGENT", "IN FLIGHT", "SCHEDULER", out, "STEP TYPE", "QUEUED"} {
			if code != 0 || !strings.Contains(table, want) {
				t.Fatalf("%s list (exit %d, %s) lacks %q:\n%s", cmd, code, errOut, want, table)
			}
		}
	}
	// agent's help describes both its uses.
	if code, help, _ := reeve(t, addr, "agent", "--help"); code != 0 || !strings.Contains(help, "reeve agent list") || !strings.Contains(help, "--demo|--chaos") {
		t.Fatalf("agent --help (exit %d) does not describe both subcommands:\n%s", code, help)
	}
}

func TestTaskListViewsAndFilters(t *testing.T) {
	addr := demoEnv(t)
	if code, _, errOut := reeve(t, addr, "task", "submit", "--workflow", "demo.orders", "--input", `{"order_id":"o-9"}`, "--id", "order-9", "--wait"); code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	for _, tc := range []struct {
		args      []string
		wantInput bool
		wantTask  bool
	}{
		{[]string{"-o", "json"}, true, true},
		{[]string{"-o", "json", "--view", "basic"}, false, true},
		{[]string{"-o", "json", "--workflow", "demo.orders", "--prefix", "order-"}, true, true},
		{[]string{"-o", "json", "--workflow", "demo.other"}, false, false},
		{[]string{"-o", "json", "--created-before", "2000-01-01T00:00:00Z"}, false, false},
	} {
		code, out, errOut := reeve(t, addr, append([]string{"task", "list"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if strings.Contains(out, `"order-9"`) != tc.wantTask || strings.Contains(out, `"o-9"`) != tc.wantInput {
			t.Errorf("%v: task listed %v (want %v), input shown %v (want %v):\n%s", tc.args, strings.Contains(out, `"order-9"`), tc.wantTask, strings.Contains(out, `"o-9"`), tc.wantInput, out)
		}
	}
	if code, _, errOut := reeve(t, addr, "task", "list", "--view", "wide"); code != 2 || !strings.Contains(errOut, "--view") {
		t.Errorf("--view wide: exit %d, %s; want a usage error naming --view", code, errOut)
	}
	if code, _, errOut := reeve(t, addr, "task", "list", "--created-after", "yesterday"); code != 2 || !strings.Contains(errOut, "--created-after") {
		t.Errorf("--created-after yesterday: exit %d, %s; want a usage error naming it", code, errOut)
	}
}

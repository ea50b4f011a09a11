package main

import (
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/workflow"
)

// A workflow file spells the wait as the issue does: waitFor (wait_for, the
// proto's name, is accepted too), with a timeout of days in Go's form.
func TestWorkflowFileWaitFor(t *testing.T) {
	for _, tc := range []struct{ path, src string }{
		{"w.yaml", "name: orders\nsteps:\n  - name: reserve\n    type: inventory.reserve\n  - name: approve\n    waitFor: external\n    timeout: 48h\n    dependsOn: [reserve]\n"},
		{"w.json", `{"name":"orders","steps":[{"name":"reserve","type":"inventory.reserve"},{"name":"approve","wait_for":"external","timeout":"172800s","dependsOn":["reserve"]}]}`},
	} {
		w, err := parseWorkflow(tc.path, []byte(tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		s := w.GetSteps()[1]
		if !workflow.WaitsExternal(s) || s.GetType() != "" || s.GetTimeout().AsDuration() != 48*time.Hour {
			t.Fatalf("%s: step %v, want waitFor external, no type, timeout 48h", tc.path, s)
		}
		if err := workflow.ValidateWorkflow("workflow", w, true); err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
	}
}

package workflow_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

func waiting() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{
		{Name: "reserve", Type: "inventory.reserve", Compensation: &reevev1.CompensationSpec{Type: "inventory.release"}},
		{Name: "approve", WaitFor: workflow.WaitExternal, Timeout: durationpb.New(48 * time.Hour), DependsOn: []string{"reserve"}},
	}}
}

func TestValidateWaitFor(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *reevev1.StepSpec)
		want   string // in the error; "" means valid
	}{
		{"valid", func(s *reevev1.StepSpec) {}, ""},
		{"thirty days", func(s *reevev1.StepSpec) { s.Timeout = durationpb.New(workflow.MaxWaitTimeout) }, ""},
		{"with compensation", func(s *reevev1.StepSpec) { s.Compensation = &reevev1.CompensationSpec{Type: "notify.withdrawn"} }, ""},
		{"with retry and escalation", func(s *reevev1.StepSpec) {
			s.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 2}
			s.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
		}, ""},
		{"unknown kind", func(s *reevev1.StepSpec) { s.WaitFor = "externl" }, `workflow.steps[1].waitFor: "externl" is not a kind of wait: the one kind is "external"; did you mean "external"?`},
		{"with a type", func(s *reevev1.StepSpec) { s.Type = "approvals.ask" }, "workflow.steps[1].type: must be empty when wait_for is set"},
		{"with a sleep", func(s *reevev1.StepSpec) { s.Sleep = durationpb.New(time.Minute) }, "workflow.steps[1].waitFor: a sleep step is run by no agent: it takes no waitFor"},
		{"no timeout", func(s *reevev1.StepSpec) { s.Timeout = nil }, "workflow.steps[1].timeout: required with wait_for"},
		{"over thirty days", func(s *reevev1.StepSpec) { s.Timeout = durationpb.New(workflow.MaxWaitTimeout + time.Second) }, "workflow.steps[1].timeout: 720h0m1s is outside [100ms, 720h0m0s]"},
		{"heartbeat", func(s *reevev1.StepSpec) { s.HeartbeatTimeout = durationpb.New(time.Minute) }, "workflow.steps[1].heartbeatTimeout: does not apply"},
		{"reassign", func(s *reevev1.StepSpec) { s.ReassignAfterDisconnect = durationpb.New(time.Minute) }, "workflow.steps[1].reassignAfterDisconnect: does not apply"},
		{"schedule-to-start", func(s *reevev1.StepSpec) { s.ScheduleToStartTimeout = durationpb.New(time.Minute) }, "workflow.steps[1].scheduleToStartTimeout: does not apply"},
		{"bad compensation", func(s *reevev1.StepSpec) { s.Compensation = &reevev1.CompensationSpec{} }, "workflow.steps[1].compensation.type: required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := waiting()
			tc.mutate(w.Steps[1])
			err := workflow.ValidateWorkflow("workflow", w, true)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateWorkflow = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateWorkflow = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// An agent's step keeps its 24h bound: only a wait may take days.
func TestAgentStepTimeoutStaysBounded(t *testing.T) {
	w := waiting()
	w.Steps[0].Timeout = durationpb.New(48 * time.Hour)
	if err := workflow.ValidateWorkflow("workflow", w, true); err == nil || !strings.Contains(err.Error(), "workflow.steps[0].timeout") {
		t.Fatalf("ValidateWorkflow = %v, want a steps[0].timeout error", err)
	}
}

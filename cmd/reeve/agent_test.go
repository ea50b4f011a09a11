package main

import (
	"context"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A workflow the schedulers refuse for good (chaos.wide against etcd's
// default operation limit) is skipped with a warning: the agent registers
// the others and goes on to serve, instead of retrying until its
// registration timeout (which kept `reeve agent --chaos` from ever serving
// a cluster without a raised --max-txn-ops).
func TestAgentSkipsAWorkflowRefusedForGood(t *testing.T) {
	s := testenv.New(t).StartScheduler("")
	g := &globals{getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := registerWorkflows(ctx, testenv.Logger(), g, []string{s.Addr}, workload.Workflows(), 20*time.Second); err != nil {
		t.Fatalf("registerWorkflows: %v", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Fatalf("registration took %v: it retried the refused workflow", took)
	}
	for _, w := range workload.Workflows() {
		_, err := s.SchedulerService().GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Name: w.GetName()})
		if wide := w.GetName() == workload.WorkflowWide; (err == nil) == wide {
			t.Errorf("workflow %s: registered %v, want %v", w.GetName(), err == nil, !wide)
		}
	}
}

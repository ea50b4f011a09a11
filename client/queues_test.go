package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
)

// A step type's limits and pause set, listed and cleared through the
// client.
func TestQueuesThroughTheClient(t *testing.T) {
	e := newEnv(t, map[string]agentsdk.HandlerFunc{"erp": func(context.Context, *agentsdk.Step) (any, error) { return nil, nil }})
	ctx := context.Background()
	cfg, err := e.c.SetQueueLimit(ctx, "erp", client.QueueLimit{MaxRunning: 3, Rate: 10})
	if err != nil || cfg.GetMaxRunning() != 3 || cfg.GetRate() != 10 || cfg.GetBurst() != 1 {
		t.Fatalf("set: %v, %v; want max 3, rate 10, burst 1", cfg, err)
	}
	if cfg, err = e.c.PauseQueue(ctx, "erp"); err != nil || !cfg.GetPaused() {
		t.Fatalf("pause: %v, %v", cfg, err)
	}
	// The agent registers on its own: the list shows it once it has.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		qs, err := e.c.ListQueues(ctx)
		if err == nil && len(qs) == 1 && qs[0].GetType() == "erp" && qs[0].GetConfig().GetPaused() && qs[0].GetAgents() == 1 {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("list: %v, %v; want erp paused with its agent", qs, err)
		}
	}
	if _, err = e.c.ResumeQueue(ctx, "erp"); err != nil {
		t.Fatal(err)
	}
	if cfg, err = e.c.ClearQueueLimit(ctx, "erp"); err != nil || cfg.GetMaxRunning() != 0 || cfg.GetRate() != 0 {
		t.Fatalf("clear: %v, %v", cfg, err)
	}
}

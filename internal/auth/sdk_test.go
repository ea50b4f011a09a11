package auth_test

import (
	"context"
	"path/filepath"
	"testing"

	"errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

func TestSDKAgentOverMutualTLS(t *testing.T) {
	e := newSecureEnv(t)
	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(e.dir, "ca.pem"), Cert: filepath.Join(e.dir, "agent-a.pem"), Key: filepath.Join(e.dir, "agent-a-key.pem")}, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agentsdk.New([]string{e.s.Addr}, agentsdk.WithNamespace("a"), agentsdk.WithAgentID("a-sdk"), agentsdk.WithTLS(cfg), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("pay.charge", func(context.Context, *agentsdk.Step) (any, error) { return map[string]any{"ok": true}, nil })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { stop(); <-done }()

	c := reevev1.NewSchedulerServiceClient(e.conn(t, "", clientToken))
	sctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.SubmitTask(sctx, inline("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := testenv.WaitTask(t, c, "a", resp.GetTask().GetId(), wait); got.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v, want SUCCEEDED", got.GetState())
	}
}

func TestSDKAgentRefusedAStepTypeStops(t *testing.T) {
	e := newSecureEnv(t)
	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(e.dir, "ca.pem"), Cert: filepath.Join(e.dir, "agent-a.pem"), Key: filepath.Join(e.dir, "agent-a-key.pem")}, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agentsdk.New([]string{e.s.Addr}, agentsdk.WithNamespace("a"), agentsdk.WithAgentID("a-sdk"), agentsdk.WithTLS(cfg), agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("refund", func(context.Context, *agentsdk.Step) (any, error) { return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = a.Run(ctx)
	if status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
		t.Fatalf("Run returned %v, want the PermissionDenied refusal", err)
	}
}

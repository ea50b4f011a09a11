package scheduler_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// RESOURCE_EXHAUSTED refusals carry a google.rpc.RetryInfo delay a client
// can act on.
func TestRefusalsCarryRetryInfo(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithSubmitRate(0.1, 1), scheduler.WithMaxUnregisteredStreams(0))
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req := &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))}
	if _, err := c.SubmitTask(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err := c.SubmitTask(ctx, req)
	if d, ok := agentsdk.RetryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok || d <= 0 {
		t.Fatalf("submit over the rate: %v (retry delay %v, %v), want RESOURCE_EXHAUSTED with a RetryInfo delay", err, d, ok)
	}
	stream, err := reevev1.NewAgentServiceClient(testenv.Dial(t, s.Addr)).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if d, ok := agentsdk.RetryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok || d <= 0 {
		t.Fatalf("stream over the unregistered cap: %v (retry delay %v, %v), want RESOURCE_EXHAUSTED with a RetryInfo delay", err, d, ok)
	}
}

// The SDK waits the delay a refusal asks for before it reconnects, instead
// of hammering the scheduler at its own (here 10-200ms) backoff.
func TestAgentHonoursRetryInfo(t *testing.T) {
	env := testenv.New(t)
	var connects atomic.Int64
	count := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if strings.HasSuffix(info.FullMethod, "/Connect") {
			connects.Add(1)
		}
		return h(srv, ss)
	})
	s := env.StartSchedulerGRPC("", []grpc.ServerOption{count}, scheduler.WithMaxUnregisteredStreams(0))
	a, err := agentsdk.New([]string{s.Addr}, agentsdk.WithLogger(testenv.Logger()), agentsdk.WithReconnectBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("x", func(context.Context, *agentsdk.Step) (any, error) { return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = a.Run(ctx)
	// Refused at once each time, 1s apart: at most 4 tries in 3s (about 15+
	// at the agent's own backoff).
	if n := connects.Load(); n < 1 || n > 4 {
		t.Fatalf("%d connection attempts in 3s, want 1-4 (one per retry delay)", n)
	}
}

// Request headers over 64 KiB are refused; calls in flight per connection
// are bounded (further calls wait in the client).
func TestGRPCLimits(t *testing.T) {
	env := testenv.New(t)
	limits := scheduler.DefaultGRPCLimits()
	limits.MaxConcurrentStreams = 1
	s := env.StartSchedulerGRPC("", scheduler.ServerOptionsWith(limits))
	cc := testenv.Dial(t, s.Addr)
	c := reevev1.NewSchedulerServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("h", 100<<10))
	if _, err := c.ListTasks(big, &reevev1.ListTasksRequest{}); err == nil {
		t.Fatal("a request with 100 KiB of headers was served, want it refused")
	}
	if _, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{}); err != nil {
		t.Fatalf("a normal request after the oversized one: %v", err)
	}

	held := testenv.ConnectRawOn(t, cc, register("a", 1, "x")) // the one stream allowed
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := c.ListTasks(short, &reevev1.ListTasksRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second call while the connection's one stream is in use: %v, want it to wait (DEADLINE_EXCEEDED)", err)
	}
	held.Close()
	deadline := time.Now().Add(wait)
	for {
		_, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls after the stream ended: %v", err)
		}
	}
}

// One client address holds at most the configured connections; a further
// one is closed at once, and gets in when another closes.
func TestConnectionsPerPeerAreCapped(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithMaxConnectionsPerPeer(2))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	call := func(cc *grpc.ClientConn, timeout time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := reevev1.NewSchedulerServiceClient(cc).ListTasks(cctx, &reevev1.ListTasksRequest{})
		return err
	}
	first, second := testenv.Dial(t, s.Addr), testenv.Dial(t, s.Addr)
	for _, cc := range []*grpc.ClientConn{first, second} {
		if err := call(cc, wait); err != nil {
			t.Fatal(err)
		}
	}
	third := testenv.Dial(t, s.Addr)
	if err := call(third, time.Second); err == nil {
		t.Fatal("a third connection from the same address was served, want it closed")
	}
	_ = first.Close()
	deadline := time.Now().Add(wait)
	for call(third, time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the third connection never got in after the first closed")
		}
	}
}

package scheduler_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reeve-org/reeve/internal/testenv"
)

// grpc.health.v1 says NOT_SERVING while etcd is down and SERVING again once
// it is back, and NOT_SERVING for good once shutdown begins.
func TestHealthFollowsEtcdAndShutdown(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	hs := health.NewServer()
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	ctx, stop := context.WithCancel(context.Background())
	reported := make(chan struct{})
	go func() { defer close(reported); s.ReportHealth(ctx, hs, 100*time.Millisecond) }()
	t.Cleanup(func() { stop(); <-reported })

	wctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	watch, err := healthpb.NewHealthClient(testenv.Dial(t, lis.Addr().String())).Watch(wctx, &healthpb.HealthCheckRequest{Service: "reeve.v1.SchedulerService"})
	if err != nil {
		t.Fatal(err)
	}
	await := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			resp, err := watch.Recv()
			if err != nil {
				t.Fatalf("waiting for %v: %v", want, err)
			}
			if resp.GetStatus() == want {
				return
			}
		}
	}
	await(healthpb.HealthCheckResponse_SERVING)
	env.Etcd.Stop()
	await(healthpb.HealthCheckResponse_NOT_SERVING)
	env.Etcd.Restart()
	await(healthpb.HealthCheckResponse_SERVING)
	stop()
	await(healthpb.HealthCheckResponse_NOT_SERVING)
}

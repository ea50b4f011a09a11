package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthFlag is --health-listen: a plaintext listener serving only the gRPC
// health service, for probes that cannot speak TLS (Kubernetes' native
// grpc probes) while the main listener serves mutual TLS.
type healthFlag struct{ listen string }

func (f *healthFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.listen, "health-listen", "", "address of a plaintext listener serving only the gRPC health service (grpc.health.v1), for Kubernetes probes when --listen serves TLS; off when empty")
}

// livenessService is a health service name that is SERVING from start to
// shutdown whatever etcd does: for liveness probes. The overall status ("")
// of a scheduler is NOT_SERVING while etcd has no quorum, which should take
// it out of load balancing (readiness) but not restart it: a restart does
// not mend etcd, and restarting every scheduler at once would.
const livenessService = "liveness"

// serveHealth serves hs on listen (nothing when listen is empty) until stop
// is called, with livenessService SERVING.
func serveHealth(log *slog.Logger, listen string, hs *health.Server) (stop func(), err error) {
	if listen == "" {
		return func() {}, nil
	}
	hs.SetServingStatus(livenessService, healthpb.HealthCheckResponse_SERVING)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--health-listen: %w", err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(lis); err != nil {
			log.Error("health listener stopped", "err", err)
		}
	}()
	log.Info("health listening", "address", lis.Addr().String())
	return func() { g.Stop(); <-done }, nil
}

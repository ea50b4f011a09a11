package scheduler

import (
	"context"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// healthServices are the names whose grpc.health.v1 status ReportHealth
// sets: the server as a whole ("") and each of the scheduler's services.
var healthServices = []string{"",
	reevev1.SchedulerService_ServiceDesc.ServiceName,
	reevev1.AgentService_ServiceDesc.ServiceName,
	reevev1.SupervisorService_ServiceDesc.ServiceName,
}

// ReportHealth keeps hs (a grpc.health.v1 server registered next to the
// scheduler) SERVING while etcd answers a linearizable read within interval
// (so also NOT_SERVING when the etcd cluster has no quorum), NOT_SERVING
// otherwise, checking every interval (default 1s when interval <= 0). When
// ctx ends it sets NOT_SERVING and returns: cancel it when shutdown begins,
// so that load balancers stop sending work while agents drain.
func (s *Server) ReportHealth(ctx context.Context, hs *health.Server, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	set := func(st healthpb.HealthCheckResponse_ServingStatus) {
		for _, name := range healthServices {
			hs.SetServingStatus(name, st)
		}
	}
	last := healthpb.HealthCheckResponse_UNKNOWN
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		cctx, cancel := context.WithTimeout(ctx, interval)
		_, err := s.store.Client().Get(cctx, s.store.SchedulerKey(s.opts.id))
		cancel()
		if err == nil {
			st = healthpb.HealthCheckResponse_SERVING
		}
		if ctx.Err() != nil {
			set(healthpb.HealthCheckResponse_NOT_SERVING)
			return
		}
		if st != last {
			s.log.Info("health", "status", st.String(), "err", err)
			set(st)
			last = st
		}
		select {
		case <-ctx.Done():
			set(healthpb.HealthCheckResponse_NOT_SERVING)
			return
		case <-t.C:
		}
	}
}

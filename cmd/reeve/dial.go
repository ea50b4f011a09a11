package main

import (
	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// connect opens a connection to the scheduler(s) at g.address with the
// global TLS and token flags (see internal/dial): a comma-separated list
// spreads requests round-robin over the schedulers that are up.
func (g *globals) connect() (*grpc.ClientConn, error) {
	cc, err := dial.Schedulers(g.sec.dialConfig(g.address), telemetry.ClientHandler(), grpc.WithChainUnaryInterceptor(retryRefusals))
	if err != nil {
		return nil, dialUsage(err, "--address")
	}
	return cc, nil
}

// dial returns a client of the scheduler's client API.
func (g *globals) dial() (reevev1.SchedulerServiceClient, func(), error) {
	flush := g.clientTelemetry()
	cc, err := g.connect()
	if err != nil {
		flush()
		return nil, nil, err
	}
	return reevev1.NewSchedulerServiceClient(cc), func() { _ = cc.Close(); flush() }, nil
}

// dialOperator returns a client of the operator API (recovery and alerts).
func (g *globals) dialOperator() (reevev1.SupervisorServiceClient, func(), error) {
	cc, err := g.connect()
	if err != nil {
		return nil, nil, err
	}
	return reevev1.NewSupervisorServiceClient(cc), func() { _ = cc.Close() }, nil
}

package main

import (
	"fmt"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// connect opens a connection to the scheduler at g.address. All connection
// options live here.
func (g *globals) connect() (*grpc.ClientConn, error) {
	opts, err := g.sec.dialOptions()
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(g.address, append(opts, telemetry.ClientHandler())...)
	if err != nil {
		return nil, fmt.Errorf("--address %q: %w", g.address, err)
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

package main

import (
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// connect opens a connection to the scheduler(s) at g.address. All
// connection options live here. A comma-separated list spreads requests
// round-robin over the schedulers that are up (a failed one is skipped until
// it answers again); with TLS each is verified against its own host name
// unless --tls-server-name is set.
func (g *globals) connect() (*grpc.ClientConn, error) {
	addrs := splitAddrs(g.address)
	if len(addrs) == 0 {
		return nil, usagef("--address: want host:port[,host:port...], got %q", g.address)
	}
	opts, err := g.sec.dialOptions()
	if err != nil {
		return nil, err
	}
	target := addrs[0]
	if len(addrs) > 1 {
		r := manual.NewBuilderWithScheme("reeve")
		state := resolver.State{}
		for _, a := range addrs {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				return nil, usagef("--address %q: %v", a, err)
			}
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
		}
		r.InitialState(state)
		target = r.Scheme() + ":///schedulers"
		opts = append(opts, grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	}
	cc, err := grpc.NewClient(target, append(opts, telemetry.ClientHandler(), grpc.WithChainUnaryInterceptor(retryRefusals))...)
	if err != nil {
		return nil, fmt.Errorf("--address %q: %w", g.address, err)
	}
	return cc, nil
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func joinAddrs(addrs []string) string { return strings.Join(addrs, ",") }

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

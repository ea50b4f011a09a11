package main

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// dial connects to the scheduler at g.address. All connection options live
// here.
func (g *globals) dial() (reevev1.SchedulerServiceClient, func(), error) {
	cc, err := grpc.NewClient(g.address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("--address %q: %w", g.address, err)
	}
	return reevev1.NewSchedulerServiceClient(cc), func() { _ = cc.Close() }, nil
}

// Command agent runs the trip saga's steps (see package trip) for a
// scheduler until interrupted.
//
//	go run ./examples/trip/agent --address 127.0.0.1:7430
//	go run ./examples/trip/agent --ca ca.pem --cert agent.pem --key agent-key.pem   # mutual TLS
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/examples/trip"
)

func main() {
	address := flag.String("address", "127.0.0.1:7430", "scheduler address")
	id := flag.String("agent-id", "trip-agent", "the agent's id")
	ca := flag.String("ca", "", "CA bundle of the scheduler's certificate: turns TLS on (default plaintext)")
	cert := flag.String("cert", "", "the agent's client certificate (mutual TLS)")
	key := flag.String("key", "", "the key of --cert")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := []agentsdk.Option{agentsdk.WithAgentID(*id), agentsdk.WithLogger(log)}
	if *ca != "" {
		opts = append(opts, agentsdk.WithTLSFiles(agentsdk.TLSFiles{CA: *ca, Cert: *cert, Key: *key}))
	}
	agent, err := agentsdk.New([]string{*address}, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	trip.Register(agent, trip.NewLedger(), log)
	log.Info("serving the trip saga's steps", "address", *address)
	if err := agent.Run(ctx); err != nil { // until interrupted, then drains
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

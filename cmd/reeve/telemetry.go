package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/telemetry"
)

// telemetryFlags are the observability flags of the server commands; the
// rest comes from the standard OTEL_* environment variables.
type telemetryFlags struct{ metricsListen string }

func (f *telemetryFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.metricsListen, "metrics-listen", "",
		"address of a Prometheus /metrics endpoint, e.g. 127.0.0.1:9464 (default off; OTLP export is configured by OTEL_* variables)")
}

// start sets up OpenTelemetry for a server process and, with
// --metrics-listen, serves /metrics. The returned function flushes and
// stops both; call it once the process's work is done.
func (f *telemetryFlags) start(ctx context.Context, log *slog.Logger, service string) (func(), error) {
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: service, Prometheus: f.metricsListen != ""})
	if err != nil {
		return nil, err
	}
	var srv *http.Server
	if f.metricsListen != "" {
		lis, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			_ = tel.Shutdown(ctx)
			return nil, usagef("--metrics-listen: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", tel.MetricsHandler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics endpoint stopped", "err", err)
			}
		}()
		log.Info("metrics endpoint listening", "address", "http://"+lis.Addr().String()+"/metrics")
	}
	if tel.Tracing() {
		log.Info("exporting traces over OTLP")
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv != nil {
			_ = srv.Shutdown(sctx)
		}
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("flush telemetry", "err", err)
		}
	}, nil
}

// clientTelemetry sets up tracing for a client command once (spans of its
// RPCs start the traces of the tasks it submits) and returns the flush to
// run when the command ends.
func (g *globals) clientTelemetry() func() {
	getenv := g.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "reeve-cli", Getenv: getenv})
	if err != nil {
		fmt.Fprintf(os.Stderr, "reeve: telemetry off: %v\n", err)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	}
}

// Package telemetry wires Reeve to OpenTelemetry: tracer and meter providers
// configured from the standard OTEL_* environment variables, the otelgrpc
// stats handlers for every gRPC server and client, the W3C trace context
// carried in task records and step assignments, the attribute names of
// Reeve's spans and metrics, and a log/slog handler that adds trace and span
// ids to log records.
//
//	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "reeve-scheduler"})
//	if err != nil { ... }
//	defer tel.Shutdown(context.Background()) // flushes spans and metrics
//	g := grpc.NewServer(telemetry.ServerHandler())
//
// With no OTLP endpoint configured and no Prometheus endpoint asked for,
// Setup installs nothing: the global providers stay no-ops and nothing is
// exported or logged. See docs/observability.md.
package telemetry

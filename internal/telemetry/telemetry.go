package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/reeve-org/reeve/internal/version"
)

// Config is what Setup needs besides the environment.
type Config struct {
	// Service is the service.name of the resource unless OTEL_SERVICE_NAME
	// or OTEL_RESOURCE_ATTRIBUTES set it; required.
	Service string
	// Prometheus adds a Prometheus reader: Telemetry.MetricsHandler then
	// serves /metrics. Default off.
	Prometheus bool
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
}

// Telemetry is what Setup installed. Its zero value (nothing installed) is
// valid: Shutdown does nothing and MetricsHandler is nil.
type Telemetry struct {
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	metrics http.Handler
}

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t != nil && t.tp != nil }

// MetricsHandler serves the Prometheus exposition of every Reeve metric, or
// is nil without Config.Prometheus.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t == nil {
		return nil
	}
	return t.metrics
}

// Shutdown flushes spans and metrics not yet exported and stops the
// exporters; bounded by ctx.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Setup configures OpenTelemetry from the standard environment variables
// and installs the global tracer provider, meter provider and propagators
// (W3C trace context and baggage):
//
//   - OTEL_SDK_DISABLED=true turns everything off.
//   - Spans are exported over OTLP when OTEL_TRACES_EXPORTER is "otlp", or
//     when it is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; "none" turns them off.
//   - Metrics likewise with OTEL_METRICS_EXPORTER and
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, plus Prometheus with
//     Config.Prometheus.
//   - OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL picks "grpc" or
//     "http/protobuf" (the default, as the specification says). Every other
//     OTEL_EXPORTER_OTLP_* variable (headers, timeout, insecure, ...) and
//     OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL are read by
//     the SDK and exporters themselves.
//
// With nothing configured it installs nothing and returns a Telemetry whose
// Shutdown does nothing: the process exports nothing and logs nothing.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	t := &Telemetry{}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return t, nil
	}
	traces, err := enabled(getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if err != nil {
		return nil, err
	}
	metrics, err := enabled(getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if err != nil {
		return nil, err
	}
	if !traces && !metrics && !cfg.Prometheus {
		return t, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(cfg.Service), semconv.ServiceVersion(version.Get().Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if traces {
		exp, err := traceExporter(ctx, protocol(getenv, "TRACES"))
		if err != nil {
			return nil, err
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator()))
		otel.SetTracerProvider(t.tp)
	}
	var readers []sdkmetric.Option
	if metrics {
		exp, err := metricExporter(ctx, protocol(getenv, "METRICS"))
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	if cfg.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if len(readers) > 0 {
		t.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(t.mp)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return t, nil
}

// enabled reads an OTEL_*_EXPORTER variable: "otlp" or "none", or unset,
// which means OTLP when an endpoint is configured.
func enabled(getenv func(string) string, exporterVar, endpointVar string) (bool, error) {
	switch v := strings.TrimSpace(getenv(exporterVar)); v {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(endpointVar) != "", nil
	default:
		return false, fmt.Errorf("telemetry: %s=%q: want otlp or none (Prometheus is the --metrics-listen flag)", exporterVar, v)
	}
}

func protocol(getenv func(string) string, signal string) string {
	if p := getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"); p != "" {
		return p
	}
	if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return "http/protobuf"
}

func traceExporter(ctx context.Context, proto string) (sdktrace.SpanExporter, error) {
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf":
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("telemetry: OTLP protocol %q: want grpc or http/protobuf", proto)
}

func metricExporter(ctx context.Context, proto string) (sdkmetric.Exporter, error) {
	switch proto {
	case "grpc":
		return otlpmetricgrpc.New(ctx)
	case "http/protobuf":
		return otlpmetrichttp.New(ctx)
	}
	return nil, fmt.Errorf("telemetry: OTLP protocol %q: want grpc or http/protobuf", proto)
}

// ServerHandler is the otelgrpc stats handler for a gRPC server: a span per
// RPC (RPC semantic conventions) joined to the caller's trace, and RPC
// metrics. Health checks and reflection are not traced. Trace context is
// read as W3C trace context and baggage unless opts say otherwise;
// providers default to the global ones.
func ServerHandler(opts ...otelgrpc.Option) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(append(defaultHandlerOptions(), opts...)...))
}

// ClientHandler is the otelgrpc stats handler for a gRPC client connection.
func ClientHandler(opts ...otelgrpc.Option) grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(append(defaultHandlerOptions(), opts...)...))
}

func defaultHandlerOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithFilter(traced),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
	}
}

func traced(info *stats.RPCTagInfo) bool {
	return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.") && !strings.HasPrefix(info.FullMethodName, "/grpc.reflection.")
}

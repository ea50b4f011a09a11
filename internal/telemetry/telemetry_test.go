package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/reeve-org/reeve/internal/telemetry"
)

// The OTEL_* variables decide what is exported; nothing configured means
// nothing installed, and a value that cannot be honoured is an error at
// start-up rather than silence.
func TestSetupFromEnvironment(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(tracenoop.NewTracerProvider()) })
	cases := []struct {
		name    string
		env     map[string]string
		tracing bool
		err     string
	}{
		{"nothing set: off", nil, false, ""},
		{"endpoint: traces over OTLP", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, ""},
		{"traces endpoint only, grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, false, ""},
		{"SDK disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}, false, ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "protocol"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "test", Getenv: func(k string) string { return tc.env[k] }})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			defer func() { _ = tel.Shutdown(ctx) }()
			if tel.Tracing() != tc.tracing || tel.MetricsHandler() != nil {
				t.Fatalf("tracing %v, metrics handler %v; want tracing %v and no handler", tel.Tracing(), tel.MetricsHandler() != nil, tc.tracing)
			}
		})
	}
}

// An attempt span gets its derived id; its children get fresh ones.
func TestDerivedSpanIDAppliesToOneSpan(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithIDGenerator(telemetry.IDGenerator()))
	tr := tp.Tracer("test")
	ctx, task := tr.Start(context.Background(), "task")
	want := telemetry.AttemptSpanContext(task.SpanContext(), "ns", "t1", "pay", 2)
	if again := telemetry.AttemptSpanContext(task.SpanContext(), "ns", "t1", "pay", 2); again.SpanID() != want.SpanID() {
		t.Fatal("attempt span id is not deterministic")
	}
	if other := telemetry.AttemptSpanContext(task.SpanContext(), "ns", "t1", "pay", 3); other.SpanID() == want.SpanID() {
		t.Fatal("two attempts share a span id")
	}
	actx, attempt := tr.Start(telemetry.WithSpanID(ctx, want.SpanID()), "attempt")
	_, child := tr.Start(actx, "child")
	if attempt.SpanContext().SpanID() != want.SpanID() {
		t.Errorf("attempt span id %v, want %v", attempt.SpanContext().SpanID(), want.SpanID())
	}
	if child.SpanContext().SpanID() == want.SpanID() || !child.SpanContext().SpanID().IsValid() {
		t.Errorf("child span id %v reuses the attempt's", child.SpanContext().SpanID())
	}
	if telemetry.AttemptSpanContext(trace.SpanContext{}, "ns", "t1", "pay", 2).IsValid() {
		t.Error("an attempt of an untraced task has a span context")
	}
	// The carrier round trip used by task records and assignments.
	got := trace.SpanContextFromContext(telemetry.Extract(context.Background(), telemetry.Inject(actx)))
	if got.SpanID() != want.SpanID() || got.TraceID() != want.TraceID() {
		t.Errorf("extracted %v, want %v", got, want)
	}
	if telemetry.Inject(context.Background()) != nil {
		t.Error("a context without a span injects a carrier")
	}
}

// Log records written with a span's context carry its ids.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	log.InfoContext(ctx, "with span")
	log.Info("without span")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var with, without map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &with) != nil || json.Unmarshal([]byte(lines[1]), &without) != nil {
		t.Fatalf("log output %q", buf.String())
	}
	if with["trace_id"] != span.SpanContext().TraceID().String() || with["span_id"] != span.SpanContext().SpanID().String() || with["component"] != "test" {
		t.Errorf("record with span: %v", with)
	}
	if _, ok := without["trace_id"]; ok {
		t.Errorf("record without span has a trace id: %v", without)
	}
}

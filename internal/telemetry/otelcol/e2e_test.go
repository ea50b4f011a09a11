// Package otelcol_test is the end-to-end tracing test behind `make
// e2e-otel`: a real OpenTelemetry Collector (built from builder.yaml)
// receives the spans of `reeve dev --demo` and of the reeve CLI over OTLP and
// forwards them over OTLP/HTTP to this test, which checks the traces of two
// demo tasks.
package otelcol_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is one received span with its service.
type span struct {
	*tracepb.Span
	service string
}

func (s span) id() string     { return hex.EncodeToString(s.GetSpanId()) }
func (s span) parent() string { return hex.EncodeToString(s.GetParentSpanId()) }
func (s span) trace() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s span) attr(k string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == k {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetIntValue() != 0:
				return fmt.Sprint(v.GetIntValue())
			}
			return fmt.Sprint(v.GetBoolValue())
		}
	}
	return ""
}

// sink is an OTLP/HTTP receiver of traces and metrics: what the collector
// exports.
type sink struct {
	mu      sync.Mutex
	spans   []span
	metrics map[string]bool // names of the metrics received
}

func (k *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if r.URL.Path == "/v1/metrics" {
		k.metricsRequest(w, body)
		return
	}
	if r.URL.Path != "/v1/traces" {
		http.Error(w, "unknown path", http.StatusNotFound)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				k.spans = append(k.spans, span{s, service})
			}
		}
	}
	k.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (k *sink) metricsRequest(w http.ResponseWriter, body []byte) {
	req := &colmetricpb.ExportMetricsServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				k.metrics[m.GetName()] = true
			}
		}
	}
	k.mu.Unlock()
	out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (k *sink) hasMetric(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.metrics[name]
}

func (k *sink) snapshot() []span {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]span(nil), k.spans...)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs a command until the test ends (SIGINT, then kill after 10s),
// with its output in the test log on failure.
func start(t *testing.T, name string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *sync.Mutex) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	var mu sync.Mutex
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("%s output:\n%s", filepath.Base(name), out.String())
			mu.Unlock()
		}
	})
	return cmd, &out, &mu
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func TestCollectorReceivesTaskTraces(t *testing.T) {
	otelcol, reeve := os.Getenv("REEVE_E2E_OTELCOL"), os.Getenv("REEVE_E2E_REEVE")
	if otelcol == "" || reeve == "" {
		t.Skip("end-to-end test: run `make e2e-otel` (needs REEVE_E2E_OTELCOL and REEVE_E2E_REEVE)")
	}
	received := &sink{metrics: map[string]bool{}}
	sinkLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Server{Handler: received, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = web.Serve(sinkLis) }()
	t.Cleanup(func() { _ = web.Close() })

	dir := t.TempDir()
	otlpGRPC, otlpHTTP := freePort(t), freePort(t)
	config := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  otlp_http:
    endpoint: http://%s
    compression: none
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: info
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp_http, debug]
    metrics:
      receivers: [otlp]
      exporters: [otlp_http]
`, otlpGRPC, otlpHTTP, sinkLis.Addr())
	if err := os.WriteFile(filepath.Join(dir, "otelcol.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, otelcol, nil, "--config", filepath.Join(dir, "otelcol.yaml"))
	waitFor(t, "the collector's OTLP receivers", 30*time.Second, func() bool {
		for _, a := range []string{otlpGRPC, otlpHTTP} {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				return false
			}
			_ = c.Close()
		}
		return true
	})

	// The server exports over OTLP/gRPC, the CLI over OTLP/HTTP. Every
	// listener of reeve dev is on port 0; it prints where they are.
	_, devOut, devMu := start(t, reeve, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlpGRPC, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRIC_EXPORT_INTERVAL=500",
	}, "dev", "--demo", "--data-dir", filepath.Join(dir, "reeve"), "--listen", "127.0.0.1:0", "--supervisor-tick", "200ms", "--log-format", "json",
		"--metrics-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--etcd-listen", "127.0.0.1:0")
	addrRe := regexp.MustCompile(`reeve dev: scheduler and supervisor on (\S+) `)
	metricsRe := regexp.MustCompile(`"msg":"metrics endpoint listening","address":"([^"]+)"`)
	var addr, metricsURL string
	waitFor(t, "reeve dev's addresses", 60*time.Second, func() bool {
		devMu.Lock()
		defer devMu.Unlock()
		if m := addrRe.FindStringSubmatch(devOut.String()); m != nil {
			addr = m[1]
		}
		if m := metricsRe.FindStringSubmatch(devOut.String()); m != nil {
			metricsURL = m[1]
		}
		return addr != "" && metricsURL != ""
	})
	cliEnv := append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+otlpHTTP, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "REEVE_ADDRESS="+addr)
	for _, wf := range []string{"demo.compensate", "demo.timeout"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cli := exec.CommandContext(ctx, reeve, "task", "submit", "--workflow", wf, "--input", `{"order_id":"o-e2e"}`, "--id", "e2e-"+wf, "--wait", "--exit-code=false", "--timeout", "30s")
		cli.Env = cliEnv
		out, err := cli.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("reeve task submit %s: %v\n%s", wf, err, out)
		}
	}

	// Find the traces by the client's submit spans, then check each tree.
	var spans []span
	byID := map[string]span{}
	roots := map[string]span{}
	complete := func() bool {
		spans = received.snapshot()
		byID, roots = map[string]span{}, map[string]span{}
		for _, s := range spans {
			byID[s.id()] = s
			if s.GetName() == "reeve.v1.SchedulerService/SubmitTask" && s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
				roots[s.service] = s
			}
		}
		count := func(name string) (n int) {
			for _, s := range spans {
				if s.GetName() == name {
					n++
				}
			}
			return n
		}
		// demo.compensate: reserve, charge, ship, refund, release; demo.timeout: flaky ×2.
		return len(roots) == 1 && count("reeve.step.attempt") >= 7 && count("reeve.step.execute") >= 7 && count("reeve.supervisor.decide") >= 1
	}
	waitFor(t, "the spans of both tasks at the collector's exporter", 30*time.Second, complete)
	// Metrics: over OTLP through the collector, and on --metrics-listen.
	waitFor(t, "reeve.tasks.submitted over OTLP", 30*time.Second, func() bool { return received.hasMetric("reeve.tasks.submitted") })
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	prom, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Contains(prom, []byte("reeve_tasks_submitted_total{")) || !bytes.Contains(prom, []byte("reeve_supervisor_recoveries_total{")) {
		t.Errorf("--metrics-listen /metrics lacks the task counters:\n%s", prom)
	}
	t.Logf("%d spans received through the collector", len(spans))
	root := roots["reeve-cli"]
	if root.Span == nil {
		t.Fatalf("no client submit span from service reeve-cli: %v", roots)
	}
	// in returns the spans of the task's trace named name.
	in := func(task, name string) []span {
		var out []span
		for _, s := range spans {
			if s.GetName() == name && s.attr("reeve.task.id") == task {
				out = append(out, s)
			}
		}
		return out
	}
	childOf := func(c, p span) {
		t.Helper()
		if c.parent() != p.id() || c.trace() != p.trace() {
			t.Errorf("%s %s#%s (%s) is not a child of %s (%s)", c.GetName(), c.attr("reeve.step.name"), c.attr("reeve.step.attempt"), c.service, p.GetName(), p.service)
		}
	}
	links := func(from, to span) {
		t.Helper()
		for _, l := range from.GetLinks() {
			if hex.EncodeToString(l.GetSpanId()) == to.id() && hex.EncodeToString(l.GetTraceId()) == to.trace() {
				return
			}
		}
		t.Errorf("%s %s#%s does not link to %s#%s", from.GetName(), from.attr("reeve.step.name"), from.attr("reeve.step.attempt"), to.attr("reeve.step.name"), to.attr("reeve.step.attempt"))
	}
	for _, task := range []string{"e2e-demo.compensate", "e2e-demo.timeout"} {
		submits := in(task, "reeve.task.submit")
		if len(submits) != 1 {
			t.Fatalf("%s: %d submit spans", task, len(submits))
		}
		submit := submits[0]
		server := byID[submit.parent()]
		client := byID[server.parent()]
		if server.GetKind() != tracepb.Span_SPAN_KIND_SERVER || server.service != "reeve-dev" || client.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || client.service != "reeve-cli" || client.parent() != "" {
			t.Errorf("%s: submit span's parent %q (%s, %v), its parent %q (%s, %v); want the server span of reeve-dev under the root client span of reeve-cli",
				task, server.GetName(), server.service, server.GetKind(), client.GetName(), client.service, client.GetKind())
		}
		attempts := map[string]span{}
		for _, a := range in(task, "reeve.step.attempt") {
			childOf(a, submit)
			attempts[a.attr("reeve.step.name")+"#"+a.attr("reeve.step.attempt")] = a
		}
		for _, ex := range in(task, "reeve.step.execute") {
			a, ok := attempts[ex.attr("reeve.step.name")+"#"+ex.attr("reeve.step.attempt")]
			if !ok {
				t.Errorf("%s: execution %s#%s without attempt span", task, ex.attr("reeve.step.name"), ex.attr("reeve.step.attempt"))
				continue
			}
			childOf(ex, a)
		}
		want := map[string][]string{
			"e2e-demo.compensate": {"reserve#1", "charge#1", "ship#1", "charge#2", "reserve#2"},
			"e2e-demo.timeout":    {"flaky#1", "flaky#2"},
		}[task]
		for _, k := range want {
			if _, ok := attempts[k]; !ok {
				t.Fatalf("%s: no attempt span %s (have %d attempt spans)", task, k, len(attempts))
			}
		}
		// The scheduler's log line about the submission carries the trace.
		devMu.Lock()
		logs := devOut.String()
		devMu.Unlock()
		if want := fmt.Sprintf(`"trace_id":%q`, submit.trace()); !strings.Contains(logLine(logs, "task submitted", task), want) {
			t.Errorf("%s: log line %q does not carry %s", task, logLine(logs, "task submitted", task), want)
		}
		if task == "e2e-demo.compensate" {
			links(attempts["charge#2"], attempts["charge#1"])
			links(attempts["reserve#2"], attempts["reserve#1"])
			if attempts["charge#2"].attr("reeve.step.compensation") != "true" {
				t.Errorf("charge#2 is not marked as a compensation")
			}
			continue
		}
		links(attempts["flaky#2"], attempts["flaky#1"])
		decisions := in(task, "reeve.supervisor.decide")
		if len(decisions) != 1 || decisions[0].attr("reeve.supervisor.action") != "retry" {
			t.Fatalf("%s: decisions %v", task, decisions)
		}
		childOf(decisions[0], submit)
		links(decisions[0], attempts["flaky#1"])
	}
}

// logLine returns the JSON log line with message msg about task.
func logLine(logs, msg, task string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, fmt.Sprintf(`"msg":%q`, msg)) && strings.Contains(l, fmt.Sprintf(`"task_id":%q`, task)) {
			return l
		}
	}
	return ""
}

package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

const wait = 30 * time.Second

// traced is a scheduler, supervisor, agent and client wired to one
// in-memory span recorder through otelgrpc, as `reeve dev` wires them to
// the OTLP exporter.
type traced struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	client reevev1.SchedulerServiceClient
}

func startTraced(t *testing.T, mp metric.MeterProvider, handlers map[string]agentsdk.HandlerFunc) *traced {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithIDGenerator(telemetry.IDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	withTP := otelgrpc.WithTracerProvider(tp)

	env := testenv.New(t)
	srv := scheduler.New(env.Etcd.Client(), scheduler.WithLogger(testenv.Logger()), scheduler.WithTracerProvider(tp), scheduler.WithMeterProvider(mp), scheduler.WithDrainTimeout(2*time.Second))
	g := grpc.NewServer(append(scheduler.ServerOptions(), telemetry.ServerHandler(withTP))...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { _ = g.Serve(lis) }()
	go func() { defer close(runDone); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone; g.Stop() })
	addr := lis.Addr().String()

	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), telemetry.ClientHandler(withTP))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	sup, err := supervisor.New(env.Etcd.Client(), []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(dial())},
		supervisor.WithLogger(testenv.Logger()), supervisor.WithTick(100*time.Millisecond), supervisor.WithSessionTTL(2), supervisor.WithTracerProvider(tp), supervisor.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	supDone := make(chan struct{})
	go func() { defer close(supDone); _ = sup.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-supDone })

	agent, err := agentsdk.New([]string{addr}, agentsdk.WithAgentID("traced-agent"), agentsdk.WithLogger(testenv.Logger()),
		agentsdk.WithTracerProvider(tp), agentsdk.WithShutdownTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		agent.Handle(typ, h)
	}
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = agent.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-agentDone })
	return &traced{spans: spans, tp: tp, client: reevev1.NewSchedulerServiceClient(dial())}
}

// A task whose second step times out once (the supervisor retries it),
// fails once (the scheduler retries it after a backoff) and then fails for
// good (the task compensates the first step) tells its whole story in one
// trace: submit → attempts → executions, the supervisor's decision, and the
// compensation; every attempt of a step links to the one before.
func TestSpanTreeOfTaskWithRetryAndCompensation(t *testing.T) {
	tr := startTraced(t, noop.NewMeterProvider(), map[string]agentsdk.HandlerFunc{
		"book":   func(context.Context, *agentsdk.Step) (any, error) { return map[string]any{"booking": "b-1"}, nil },
		"unbook": func(context.Context, *agentsdk.Step) (any, error) { return nil, nil },
		"pay": func(ctx context.Context, s *agentsdk.Step) (any, error) {
			switch s.Attempt {
			case 1: // hangs past its complete-by: the supervisor recovers it
				<-ctx.Done()
				return nil, ctx.Err()
			case 2:
				return nil, &agentsdk.Error{Code: "gateway_timeout", Message: "payment gateway timed out"}
			}
			return nil, agentsdk.Permanent(errors.New("card declined"))
		},
	})
	wf := &reevev1.Workflow{Name: "trip", Steps: []*reevev1.StepSpec{
		{Name: "book", Type: "book", Timeout: durationpb.New(10 * time.Second), Compensation: &reevev1.CompensationSpec{Type: "unbook"}},
		{Name: "pay", Type: "pay", DependsOn: []string{"book"}, Timeout: durationpb.New(500 * time.Millisecond),
			RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(50 * time.Millisecond)},
			Escalation:  reevev1.Escalation_ESCALATION_COMPENSATE},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := tr.client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "trip-1",
		Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}}); err != nil {
		t.Fatal(err)
	}
	if final := testenv.WaitTask(t, tr.client, "default", "trip-1", wait); final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("task %v (%s), want COMPENSATED", final.GetState(), final.GetReason())
	}

	// The last result span is recorded just after the record changed: wait
	// for it (bounded). Spans of the client's own watch are not looked at.
	var g spanGraph
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		g = graph(tr.spans.GetSpans())
		if results := len(g.all(named(telemetry.SpanResult))); results >= 4 || time.Now().After(deadline) {
			break
		}
	}
	submitRPC := g.one(t, "client SubmitTask", func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == "reeve.v1.SchedulerService/SubmitTask" && s.SpanKind() == trace.SpanKindClient
	})
	if submitRPC.Parent().IsValid() {
		t.Errorf("client submit span has parent %v, want a root", submitRPC.Parent())
	}
	tid := submitRPC.SpanContext().TraceID()
	g = g.trace(tid)
	serverRPC := g.one(t, "server SubmitTask", func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == "reeve.v1.SchedulerService/SubmitTask" && s.SpanKind() == trace.SpanKindServer
	})
	g.childOf(t, serverRPC, submitRPC)
	if sys, rpc := attr(serverRPC, "rpc.system.name")+attr(serverRPC, "rpc.system"), attr(serverRPC, "rpc.method"); sys != "grpc" || !strings.HasSuffix(rpc, "SubmitTask") {
		t.Errorf("server span rpc.system %q rpc.method %q, want the RPC semantic conventions from otelgrpc (%v)", sys, rpc, serverRPC.Attributes())
	}
	submit := g.one(t, "submit", named(telemetry.SpanSubmit))
	g.childOf(t, submit, serverRPC)

	attempt := func(step string, n int) sdktrace.ReadOnlySpan {
		return g.one(t, fmt.Sprintf("attempt %s#%d", step, n), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == telemetry.SpanAttempt && attr(s, "reeve.step.name") == step && attr(s, "reeve.step.attempt") == fmt.Sprint(n)
		})
	}
	execution := func(a sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		return g.one(t, "execution of "+a.SpanContext().SpanID().String(), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == telemetry.SpanExecute && s.Parent().SpanID() == a.SpanContext().SpanID()
		})
	}
	book1, pay1, pay2, pay3, unbook := attempt("book", 1), attempt("pay", 1), attempt("pay", 2), attempt("pay", 3), attempt("book", 2)
	for _, a := range []sdktrace.ReadOnlySpan{book1, pay1, pay2, pay3, unbook} {
		g.childOf(t, a, submit)
		if attr(a, "reeve.task.id") != "trip-1" || attr(a, "reeve.agent.id") != "traced-agent" {
			t.Errorf("attempt span %s: task %q agent %q", a.Name(), attr(a, "reeve.task.id"), attr(a, "reeve.agent.id"))
		}
		ex := execution(a)
		if attr(ex, "reeve.step.attempt") != attr(a, "reeve.step.attempt") || attr(ex, "reeve.step.name") != attr(a, "reeve.step.name") {
			t.Errorf("execution span %v under attempt span %v", ex.Attributes(), a.Attributes())
		}
	}
	if attr(unbook, "reeve.step.compensation") != "true" || attr(unbook, "reeve.step.type") != "unbook" || attr(book1, "reeve.step.compensation") != "false" {
		t.Errorf("compensation attempt %v, first attempt %v", unbook.Attributes(), book1.Attributes())
	}
	// Attempts of a step are linked to each other.
	linksTo(t, pay2, pay1)
	linksTo(t, pay3, pay2)
	linksTo(t, unbook, book1)
	if len(pay1.Links()) != 0 || len(book1.Links()) != 0 {
		t.Errorf("first attempts have links: %v %v", pay1.Links(), book1.Links())
	}

	// The supervisor's decision about the expired first attempt: in the
	// task's trace, linked to the attempt, parent of the scheduler's
	// application of it (decisions travel in batches: RecoverSteps).
	decision := g.one(t, "decision", named(telemetry.SpanDecision))
	g.childOf(t, decision, submit)
	linksTo(t, decision, pay1)
	if attr(decision, "reeve.supervisor.action") != "retry" || attr(decision, "reeve.step.attempt") != "1" {
		t.Errorf("decision attributes %v", decision.Attributes())
	}
	g.childOf(t, g.one(t, "recovery apply", named(telemetry.SpanRecoveryApply)), decision)

	// What each result led to, under its attempt's span.
	result := func(a sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		return g.one(t, "result of "+a.Name(), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == telemetry.SpanResult && s.Parent().SpanID() == a.SpanContext().SpanID()
		})
	}
	for _, c := range []struct {
		attempt sdktrace.ReadOnlySpan
		outcome string
	}{{book1, "succeeded"}, {pay2, "backoff"}, {pay3, "compensate"}, {unbook, "succeeded"}} {
		if got := attr(result(c.attempt), "reeve.step.outcome"); got != c.outcome {
			t.Errorf("result of %s#%s: outcome %q, want %q", attr(c.attempt, "reeve.step.name"), attr(c.attempt, "reeve.step.attempt"), got, c.outcome)
		}
	}
	if t.Failed() {
		t.Log(g.dump())
	}
}

type spanGraph []sdktrace.ReadOnlySpan

func graph(spans tracetest.SpanStubs) spanGraph {
	return spanGraph(spans.Snapshots())
}

func (g spanGraph) trace(tid trace.TraceID) spanGraph {
	var out spanGraph
	for _, s := range g {
		if s.SpanContext().TraceID() == tid {
			out = append(out, s)
		}
	}
	return out
}

func (g spanGraph) all(match func(sdktrace.ReadOnlySpan) bool) spanGraph {
	var out spanGraph
	for _, s := range g {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

func (g spanGraph) one(t *testing.T, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range g {
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d spans match, want 1\n%s", what, len(found), g.dump())
	}
	return found[0]
}

func (g spanGraph) childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%s (%v) is not a child of %s (%v)", child.Name(), child.Attributes(), parent.Name(), parent.Attributes())
	}
}

func linksTo(t *testing.T, from, to sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, l := range from.Links() {
		if l.SpanContext.SpanID() == to.SpanContext().SpanID() && l.SpanContext.TraceID() == to.SpanContext().TraceID() {
			return
		}
	}
	t.Errorf("%s %v does not link to %s %v (links %v)", from.Name(), from.Attributes(), to.Name(), to.Attributes(), from.Links())
}

func named(name string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name }
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func (g spanGraph) dump() string {
	sorted := append(spanGraph(nil), g...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].StartTime().Before(sorted[j].StartTime()) })
	var b strings.Builder
	for _, s := range sorted {
		fmt.Fprintf(&b, "%s %s parent=%s %s step=%s#%s links=%d\n", s.SpanContext().SpanID(), s.Name(), s.Parent().SpanID(),
			s.SpanKind(), attr(s, "reeve.step.name"), attr(s, "reeve.step.attempt"), len(s.Links()))
	}
	return b.String()
}

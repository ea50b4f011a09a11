package scheduler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/workflow"
	"github.com/reeve-org/reeve/scheduler"
)

// futureRequest is a ConnectRequest of a kind this scheduler does not know:
// a length-delimited field 1000, as a oneof variant added later would be.
func futureRequest() *reevev1.ConnectRequest {
	raw := protowire.AppendTag(nil, 1000, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte{0x0a, 0x03, 'n', 'e', 'w'})
	m := &reevev1.ConnectRequest{}
	m.ProtoReflect().SetUnknown(raw)
	return m
}

// counterSum reads the int64 counter name from reader, summed over its
// attributes.
func counterSum(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	return testenv.CounterSum(t, reader, name, nil)
}

// A message kind from a newer agent (and an empty message) is ignored and
// counted: the agent keeps its stream and goes on getting work on it.
func TestUnknownAgentMessageKeepsStream(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithMeterProvider(mp))
	c := s.Client(t)

	a := testenv.ConnectRaw(t, s.Addr, register("newer", 1, "x"))
	a.Send(futureRequest())
	a.Send(&reevev1.ConnectRequest{})
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "after-future", Workflow: inline(step("a", "x"))})
	as := a.NextAssignment(wait)
	if ack := a.Succeed(as.GetRef(), map[string]any{"ok": true}); !ack.GetAccepted() {
		t.Fatalf("result on the stream that sent an unknown message refused: %v", ack.GetStatus())
	}
	if n := counterSum(t, reader, "reeve.agent.unknown_messages"); n != 2 {
		t.Fatalf("reeve.agent.unknown_messages = %d, want 2", n)
	}
}

// Registered tells the agent the protocol version, the capabilities and
// the limits the scheduler enforces.
func TestRegisteredListsLimits(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithAckTimeout(3*time.Second))
	reg := register("limits", 1, "x")
	reg.ProtocolVersion = int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1)
	reg.Sdk = &reevev1.Sdk{Name: "test", Version: "v0"}
	reg.Capabilities = []string{"a_capability_from_the_future"}
	r := testenv.ConnectRaw(t, s.Addr, reg).Registered

	if r.GetProtocolVersion() != int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1) || r.GetServerVersion() == "" {
		t.Errorf("protocol_version %d, server_version %q", r.GetProtocolVersion(), r.GetServerVersion())
	}
	for _, c := range []string{scheduler.CapabilityHeartbeatDetails, scheduler.CapabilityRetryAfter} {
		if !slices.Contains(r.GetCapabilities(), c) {
			t.Errorf("capabilities %v lack %q", r.GetCapabilities(), c)
		}
	}
	want := &reevev1.AgentLimits{
		MaxOutputBytes: workflow.MaxOutputBytes, MaxErrorMessageBytes: workflow.MaxErrorMessageBytes,
		AckTimeout: durationpb.New(3 * time.Second), MaxHeartbeatDetailsBytes: workflow.MaxHeartbeatDetailsBytes,
		MaxRetryAfter: durationpb.New(workflow.MaxRetryAfter),
	}
	if !proto.Equal(r.GetLimits(), want) {
		t.Errorf("limits %v, want %v", r.GetLimits(), want)
	}
}

// retried is a step retried at once by its policy (no backoff), with a
// heartbeat timeout.
func retried(name, typ string) *reevev1.StepSpec {
	s := step(name, typ)
	s.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)}
	s.HeartbeatTimeout = durationpb.New(10 * time.Second)
	return s
}

func fail(t *testing.T, a *testenv.RawAgent, ref *reevev1.StepRef, e *reevev1.StepError) {
	t.Helper()
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: e}}}})
	if ack := a.NextResultAck(wait); !ack.GetAccepted() {
		t.Fatalf("failure refused: %v", ack.GetStatus())
	}
}

// A StepError's retry_after replaces the policy's backoff: the next attempt
// is not dispatched before it, although the policy would retry at once.
func TestStepErrorRetryAfterDelaysNextAttempt(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("limited", 1, "x"))
	task := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(retried("a", "x"))})
	first := a.NextAssignment(wait)
	const after = 1500 * time.Millisecond
	failed := time.Now()
	fail(t, a, first.GetRef(), &reevev1.StepError{Code: "rate_limited", Message: "slow down",
		Details: structpb.NewStringValue("quota reset"), RetryAfter: durationpb.New(after)})

	second := a.NextAssignment(wait)
	if got := time.Since(failed); got < after {
		t.Fatalf("attempt %d dispatched %v after the failure, before its retry_after %v", second.GetRef().GetAttempt(), got, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: task.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if d := stepOf(got.GetTask(), "a").GetLastError().GetDetails().GetStringValue(); d != "quota reset" {
		t.Errorf("last_error.details %q, want the agent's", d)
	}
}

// The last heartbeat details of an attempt that failed reach the next
// attempt's assignment, so that it can resume.
func TestHeartbeatDetailsReachNextAttempt(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("resumer", 1, "x"))
	submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(retried("a", "x"))})
	first := a.NextAssignment(wait)
	if first.GetHeartbeatDetails() != nil {
		t.Fatalf("first attempt carries heartbeat details %v", first.GetHeartbeatDetails())
	}
	for _, page := range []float64{1, 2} {
		a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{
			Refs:    []*reevev1.StepRef{first.GetRef()},
			Details: []*reevev1.HeartbeatDetails{{Ref: first.GetRef(), Details: testenv.Value(t, map[string]any{"page": page})}},
		}}})
	}
	fail(t, a, first.GetRef(), &reevev1.StepError{Code: "flaky", Message: "connection reset"})

	second := a.NextAssignment(wait)
	if got := second.GetHeartbeatDetails().GetStructValue().GetFields()["page"].GetNumberValue(); got != 2 {
		t.Fatalf("attempt %d got heartbeat details %v, want the last ones (page 2)", second.GetRef().GetAttempt(), second.GetHeartbeatDetails())
	}
}

// An attempt that misses its heartbeat keeps its last details on the step,
// for the attempt the supervisor starts next.
func TestMissedHeartbeatKeepsDetails(t *testing.T) {
	_, s, c := newEnv(t)
	a := testenv.ConnectRaw(t, s.Addr, register("stalls", 1, "x"))
	spec := retried("a", "x")
	spec.Timeout = durationpb.New(time.Minute)
	spec.HeartbeatTimeout = durationpb.New(300 * time.Millisecond)
	task := submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(spec)})
	as := a.NextAssignment(wait)
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{
		Refs:    []*reevev1.StepRef{as.GetRef()},
		Details: []*reevev1.HeartbeatDetails{{Ref: as.GetRef(), Details: structpb.NewStringValue("row 41")}},
	}}}) // and no more heartbeats
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: task.GetId()})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if d := stepOf(resp.GetTask(), "a").GetHeartbeatDetails(); d.GetStringValue() == "row 41" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("step after a missed heartbeat: %v", stepOf(resp.GetTask(), "a"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package scheduler_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// FuzzAgentStream sends arbitrary agent messages (binary ConnectRequests)
// on a registered stream of a real scheduler. Whatever arrives, the
// scheduler keeps serving, answers with defined codes (never UNKNOWN or
// INTERNAL), and a step held by another agent is never changed.
func FuzzAgentStream(f *testing.F) {
	seed := func(m *reevev1.ConnectRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	ref := &reevev1.StepRef{Namespace: "default", TaskId: "held", Step: "x", Attempt: 1}
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: ref}}})
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Message: "x", NonRetryable: true}}}}})
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{ref}}}})
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: ref}}})
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: register("again", 1, "t")}})
	seed(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Drain{Drain: &reevev1.Drain{}}})
	seed(&reevev1.ConnectRequest{})

	env := testenv.New(f)
	s := env.StartScheduler("")
	c := s.Client(f)
	holder := testenv.ConnectRaw(f, s.Addr, register("holder", 1, "t"))
	submit(f, c, &reevev1.SubmitTaskRequest{TaskId: "held", Workflow: inline(step("x", "t"))})
	holder.NextAssignment(wait)
	etcd := env.Etcd.Client()
	held := testenv.DataKeys(f, etcd)
	cc := testenv.Dial(f, s.Addr)

	var stream reevev1.AgentService_ConnectClient
	var cancel context.CancelFunc = func() {}
	f.Cleanup(func() { cancel() })
	connect := func(t *testing.T) {
		cancel()
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		var err error
		if stream, err = reevev1.NewAgentServiceClient(cc).Connect(ctx); err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: register("fuzzer", 4, "t")}}); err != nil {
			t.Fatal(err)
		}
		if m, err := stream.Recv(); err != nil || m.GetRegistered() == nil {
			t.Fatalf("register: %v %v", m, err)
		}
	}
	// A result the scheduler always answers (its ref is invalid): once its
	// ack arrives, the fuzzed message has been handled.
	sentinel := &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: &reevev1.StepRef{TaskId: "sentinel", Step: "s"}}}}

	f.Fuzz(func(t *testing.T, b []byte) {
		m := &reevev1.ConnectRequest{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		if stream == nil {
			connect(t)
		}
		_ = stream.Send(m)
		_ = stream.Send(sentinel)
		deadline := time.After(wait)
		got := make(chan error, 1)
		go func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					got <- err
					return
				}
				if ack := r.GetResultAck(); ack != nil {
					if code := codes.Code(ack.GetStatus().GetCode()); code == codes.Unknown || code == codes.Internal {
						got <- status.Errorf(codes.Internal, "result ack with code %v: %s", code, ack.GetStatus().GetMessage())
						return
					}
					if ack.GetRef().GetTaskId() == "sentinel" {
						got <- nil
						return
					}
				}
			}
		}()
		select {
		case err := <-got:
			if err != nil {
				if code := status.Code(err); code == codes.Unknown || code == codes.Internal || errors.Is(err, io.EOF) {
					t.Fatalf("stream ended with %v after %v", err, m)
				}
				stream = nil // the scheduler ended the stream (e.g. a second register): reconnect
			}
		case <-deadline:
			t.Fatalf("no answer within %v after %v", wait, m)
		}
		if now := testenv.DataKeys(t, etcd); !maps.Equal(held, now) {
			t.Fatalf("message %v changed etcd", m)
		}
	})
}

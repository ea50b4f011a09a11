package agentsdk_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// scriptedScheduler is the scheduler's side of the agent protocol played
// by the test, one stream at a time, to order messages in ways a real
// scheduler produces only by chance (an ack behind a Drain).
type scriptedScheduler struct {
	reevev1.UnimplementedAgentServiceServer
	streams chan reevev1.AgentService_ConnectServer
}

func (s *scriptedScheduler) Connect(stream reevev1.AgentService_ConnectServer) error {
	select {
	case s.streams <- stream:
	case <-stream.Context().Done():
		return nil
	}
	<-stream.Context().Done() // the test drives the stream until the agent leaves
	return nil
}

// startScripted serves a scriptedScheduler on a loopback port.
func startScripted(t *testing.T) (addr string, streams <-chan reevev1.AgentService_ConnectServer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedScheduler{streams: make(chan reevev1.AgentService_ConnectServer)}
	g := grpc.NewServer()
	reevev1.RegisterAgentServiceServer(g, s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), s.streams
}

// accept waits for the agent's next stream and its Register, and answers
// Registered.
func accept(t *testing.T, streams <-chan reevev1.AgentService_ConnectServer) (reevev1.AgentService_ConnectServer, *reevev1.Register) {
	t.Helper()
	var stream reevev1.AgentService_ConnectServer
	select {
	case stream = <-streams:
	case <-time.After(wait):
		t.Fatal("the agent did not connect")
	}
	reg := recvMsg(t, stream).GetRegister()
	if reg == nil {
		t.Fatal("the first message is not Register")
	}
	sendMsg(t, stream, &reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Registered{Registered: &reevev1.Registered{SessionId: "s", SchedulerId: "scripted"}}})
	return stream, reg
}

// recvMsg returns the agent's next message, failing the test if none comes
// within wait.
func recvMsg(t *testing.T, stream reevev1.AgentService_ConnectServer) *reevev1.ConnectRequest {
	t.Helper()
	type got struct {
		m   *reevev1.ConnectRequest
		err error
	}
	ch := make(chan got, 1)
	go func() {
		m, err := stream.Recv()
		ch <- got{m, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatalf("receive: %v", g.err)
		}
		return g.m
	case <-time.After(wait):
		t.Fatal("no message from the agent")
		return nil
	}
}

func sendMsg(t *testing.T, stream reevev1.AgentService_ConnectServer, m *reevev1.ConnectResponse) {
	t.Helper()
	if err := stream.Send(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// assign sends an assignment of a "work" step and returns its ref.
func assign(t *testing.T, stream reevev1.AgentService_ConnectServer, task string) *reevev1.StepRef {
	t.Helper()
	ref := &reevev1.StepRef{Namespace: "default", TaskId: task, Step: "x", Attempt: 1}
	sendMsg(t, stream, &reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: &reevev1.StepAssignment{
		Ref: ref, Type: "work", IdempotencyKey: task, CompleteBy: timestamppb.New(time.Now().Add(time.Minute)),
	}}})
	return ref
}

// awaitResult reads the agent's messages until a result and returns it.
func awaitResult(t *testing.T, stream reevev1.AgentService_ConnectServer) *reevev1.StepResult {
	t.Helper()
	for range 100 {
		if r := recvMsg(t, stream).GetResult(); r != nil {
			return r
		}
	}
	t.Fatal("no result among the agent's 100 messages")
	return nil
}

func refString(r *reevev1.StepRef) string {
	return fmt.Sprintf("%s/%s/%d", r.GetTaskId(), r.GetStep(), r.GetAttempt())
}

func ack(t *testing.T, stream reevev1.AgentService_ConnectServer, ref *reevev1.StepRef) {
	t.Helper()
	sendMsg(t, stream, &reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_ResultAck{ResultAck: &reevev1.ResultAck{Ref: ref, Accepted: true}}})
}

// resultThenDrain runs an agent against a scripted scheduler, has it report
// one step on its first stream, and drains that stream with the result
// not answered yet. It returns the agent's streams still to come, the
// drained one and the step's ref.
func resultThenDrain(t *testing.T) (streams <-chan reevev1.AgentService_ConnectServer, drained reevev1.AgentService_ConnectServer, ref *reevev1.StepRef) {
	t.Helper()
	addr, streams := startScripted(t)
	a := newAgent(t, []string{addr})
	a.Handle("work", func(context.Context, *agentsdk.Step) (any, error) { return "done", nil })
	runAgent(t, a)

	drained, _ = accept(t, streams)
	ref = assign(t, drained, "t1")
	if got := awaitResult(t, drained); refString(got.GetRef()) != refString(ref) {
		t.Fatalf("result for %s, want %s", refString(got.GetRef()), refString(ref))
	}
	sendMsg(t, drained, &reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Drain{Drain: &reevev1.Drain{Reason: "test"}}})
	return streams, drained, ref
}

// A result the scheduler answers after its Drain (it was still being
// recorded when the scheduler began to stop) is settled on the drained
// stream: the agent waits for the answer and does not deliver the result
// again on its next stream.
func TestDrainWaitsForTheAnswersToSentResults(t *testing.T) {
	streams, s1, ref := resultThenDrain(t)
	ack(t, s1, ref)

	s2, reg := accept(t, streams)
	if len(reg.GetRunning()) != 0 {
		t.Fatalf("register after the drain lists %v; the result answered on the drained stream must be settled", reg.GetRunning())
	}
	// A result sent again would be queued on attach, before anything the
	// agent does for the next assignment.
	next := assign(t, s2, "t2")
	if got := awaitResult(t, s2); refString(got.GetRef()) != refString(next) {
		t.Fatalf("first result on the new stream is for %s, want %s (the answered result was sent again)", refString(got.GetRef()), refString(next))
	}
	ack(t, s2, next)
}

// A drained stream whose results are never answered is left after a bound,
// and the result goes out again on the next stream.
func TestDrainWithoutAnswersRedeliversOnTheNextStream(t *testing.T) {
	streams, _, ref := resultThenDrain(t)

	s2, reg := accept(t, streams)
	if len(reg.GetRunning()) != 1 || refString(reg.GetRunning()[0]) != refString(ref) {
		t.Fatalf("register after the drain lists %v, want the unanswered %s", reg.GetRunning(), refString(ref))
	}
	if got := awaitResult(t, s2); refString(got.GetRef()) != refString(ref) {
		t.Fatalf("result on the new stream for %s, want the unanswered %s", refString(got.GetRef()), refString(ref))
	}
	ack(t, s2, ref)
}

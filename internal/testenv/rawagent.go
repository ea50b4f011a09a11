package testenv

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// RawAgent speaks the agent protocol with the generated stub only, as an
// agent in another language would; tests drive it message by message.
type RawAgent struct {
	t      testing.TB
	stream reevev1.AgentService_ConnectClient
	cancel context.CancelFunc
	// Registered is the scheduler's answer to Register.
	Registered *reevev1.Registered
	recv       chan *reevev1.ConnectResponse
	recvErr    chan error
	// held are messages NextResultAck skipped (an assignment can arrive
	// before the ack of the result that made it ready); Next returns them
	// first. Used only by the test goroutine.
	held []*reevev1.ConnectResponse
}

// ConnectRaw opens a stream to addr and registers reg; it fails the test if
// registration is refused.
func ConnectRaw(t testing.TB, addr string, reg *reevev1.Register) *RawAgent {
	t.Helper()
	a, err := TryConnectRaw(t, addr, reg)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return a
}

// ConnectRawOn is ConnectRaw over an existing connection.
func ConnectRawOn(t testing.TB, cc *grpc.ClientConn, reg *reevev1.Register) *RawAgent {
	t.Helper()
	a, err := TryConnectRawOn(t, cc, reg)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return a
}

// TryConnectRaw is ConnectRaw returning the registration error.
func TryConnectRaw(t testing.TB, addr string, reg *reevev1.Register) (*RawAgent, error) {
	t.Helper()
	return TryConnectRawOn(t, Dial(t, addr), reg)
}

// TryConnectRawOn is TryConnectRaw over an existing connection (e.g. one
// with TLS credentials).
func TryConnectRawOn(t testing.TB, cc *grpc.ClientConn, reg *reevev1.Register) (*RawAgent, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := reevev1.NewAgentServiceClient(cc).Connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	a := &RawAgent{t: t, stream: stream, cancel: cancel, recv: make(chan *reevev1.ConnectResponse, 1024), recvErr: make(chan error, 1)}
	t.Cleanup(a.Close)
	if err := stream.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: reg}}); err != nil {
		if _, rerr := stream.Recv(); rerr != nil {
			return nil, rerr // the stream's status, when the scheduler ended it
		}
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	a.Registered = first.GetRegistered()
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				a.recvErr <- err
				close(a.recv)
				return
			}
			a.recv <- m
		}
	}()
	return a, nil
}

// Close breaks the stream, as a killed agent would.
func (a *RawAgent) Close() { a.cancel() }

// Next returns the next message from the scheduler, failing the test after
// timeout.
func (a *RawAgent) Next(timeout time.Duration) *reevev1.ConnectResponse {
	a.t.Helper()
	if len(a.held) > 0 {
		m := a.held[0]
		a.held = a.held[1:]
		return m
	}
	select {
	case m, ok := <-a.recv:
		if !ok {
			a.t.Fatalf("stream ended: %v", <-a.recvErr)
		}
		return m
	case <-time.After(timeout):
		a.t.Fatalf("no message from the scheduler within %v", timeout)
		return nil
	}
}

// Recv returns the next message, or false when the stream ended or nothing
// arrived within timeout. Unlike Next it is safe to call from any goroutine.
func (a *RawAgent) Recv(timeout time.Duration) (*reevev1.ConnectResponse, bool) {
	select {
	case m, ok := <-a.recv:
		return m, ok
	case <-time.After(timeout):
		return nil, false
	}
}

// TrySend sends one message and reports whether the stream took it; safe to
// call from any goroutine.
func (a *RawAgent) TrySend(m *reevev1.ConnectRequest) bool { return a.stream.Send(m) == nil }

// NextAssignment skips other messages until an assignment arrives, and acks it.
func (a *RawAgent) NextAssignment(timeout time.Duration) *reevev1.StepAssignment {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := a.Next(time.Until(deadline))
		if as := m.GetAssignment(); as != nil {
			a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
			return as
		}
	}
}

// NextResultAck waits for a result ack; other messages that arrive first
// are kept for Next and NextAssignment.
func (a *RawAgent) NextResultAck(timeout time.Duration) *reevev1.ResultAck {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	var skipped []*reevev1.ConnectResponse
	defer func() { a.held = append(a.held, skipped...) }()
	for {
		var m *reevev1.ConnectResponse
		select {
		case m = <-a.recv:
		case <-time.After(time.Until(deadline)):
			a.t.Fatalf("no result ack within %v", timeout)
		}
		if m == nil {
			a.t.Fatalf("stream ended: %v", <-a.recvErr)
		}
		if ack := m.GetResultAck(); ack != nil {
			return ack
		}
		skipped = append(skipped, m)
	}
}

// Quiet asserts that no assignment arrives within d.
func (a *RawAgent) Quiet(d time.Duration) {
	a.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-a.recv:
			if !ok {
				return
			}
			if as := m.GetAssignment(); as != nil {
				a.t.Fatalf("unexpected assignment %v", as.GetRef())
			}
		case <-deadline:
			return
		}
	}
}

// Send sends one message.
func (a *RawAgent) Send(m *reevev1.ConnectRequest) {
	a.t.Helper()
	if err := a.stream.Send(m); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

// Succeed reports a successful result for ref and returns the ack.
func (a *RawAgent) Succeed(ref *reevev1.StepRef, output map[string]any) *reevev1.ResultAck {
	a.t.Helper()
	res := &reevev1.StepResult{Ref: ref}
	if output != nil {
		// Not a nil Output in the oneof: that is sent as an empty Value,
		// which is refused (a Value with no kind).
		res.Outcome = &reevev1.StepResult_Output{Output: Value(a.t, output)}
	}
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: res}})
	return a.NextResultAck(ackWait)
}

// Fail reports a failed result for ref and returns the ack.
func (a *RawAgent) Fail(ref *reevev1.StepRef, e *reevev1.StepError) *reevev1.ResultAck {
	a.t.Helper()
	a.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: e}}}})
	return a.NextResultAck(ackWait)
}

// ackWait bounds Succeed's and Fail's wait for the ack: a bound against a
// hang, not a latency check. The write of a record near 1 MiB under the race
// detector on a loaded 2-core machine took over 10 s.
const ackWait = time.Minute

package agentsdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/version"
)

// sdkTLS names the agent's TLS options in a transport hint.
var sdkTLS = dial.Settings{
	CA:         "agentsdk.WithTLSFiles(agentsdk.TLSFiles{CA: ...}) (or WithTLS)",
	ClientCert: "TLSFiles.Cert and Key",
	Plaintext:  "drop WithTLS and WithTLSFiles",
}

// errDrained ends a session because the scheduler asked the agent to move.
var errDrained = errors.New("agentsdk: drained by scheduler")

// drainAckWait bounds how long a drained stream stays open for the answers
// to results sent on it before the Drain arrived.
const drainAckWait = 2 * time.Second

// stableAfter is how long a session must last for the reconnect backoff to
// start over.
const stableAfter = 10 * time.Second

// connectLoop keeps one stream open, to one address at a time, until ctx
// ends. It returns nil then, or the fatal error of a refused registration.
// It starts at a random address, so that a fleet of agents given the same
// list spreads over the schedulers, and moves to the next one in the list
// after a failure or a drain.
func (a *Agent) connectLoop(ctx context.Context) error {
	failures := 0
	start := rand.IntN(len(a.addrs))
	for i := 0; ctx.Err() == nil; i++ {
		addr := a.addrs[(start+i)%len(a.addrs)]
		began := time.Now()
		registered, err := a.session(ctx, addr)
		switch {
		case ctx.Err() != nil:
			return nil
		case fatal(err):
			a.opts.log.Error("registration refused", "address", addr, "err", err)
			return fmt.Errorf("agentsdk: register with %s: %w", addr, err)
		case errors.Is(err, errDrained):
			a.opts.log.Info("scheduler draining; reconnecting", "address", addr)
			failures = 0
			continue
		}
		if time.Since(began) > stableAfter {
			failures = 0
		}
		failures++
		wait := backoff(a.opts.backoffMin, a.opts.backoffMax, failures)
		if d, ok := RetryDelay(err); ok && d > wait {
			wait = d + time.Duration(rand.Int64N(int64(d)/5+1)) // as the scheduler asked, jittered
		}
		if registered {
			a.opts.log.Warn("stream ended; reconnecting", "address", addr, "err", err, "in", wait)
		} else {
			// Not a stream that ended: none was ever open on this attempt.
			args := []any{"address", addr, "err", err, "retry_in", wait}
			if h := dial.Hint(err, sdkTLS); h != "" {
				args = append(args, "hint", h)
			}
			a.opts.log.Warn("cannot connect to scheduler", args...)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// fatal reports whether a stream error will not go away by retrying.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// backoff is full jitter over an exponential ceiling.
func backoff(minWait, maxWait time.Duration, failures int) time.Duration {
	ceiling := minWait << min(failures-1, 20)
	if ceiling > maxWait || ceiling <= 0 {
		ceiling = maxWait
	}
	return time.Duration(rand.Int64N(int64(ceiling)) + 1)
}

// session runs one stream: register, then a receive loop (here) and a send
// loop (the only caller of Send) until the stream ends. registered reports
// whether the scheduler answered Register (the stream was open).
func (a *Agent) session(ctx context.Context, addr string) (registered bool, err error) {
	cc, callOpts := a.conn, []grpc.CallOption(nil)
	if cc == nil {
		cc, err = grpc.NewClient(addr, append(a.opts.dialOptions(),
			telemetry.ClientHandler(otelgrpc.WithTracerProvider(a.opts.tracer), otelgrpc.WithMeterProvider(a.opts.meter)))...)
		if err != nil {
			return false, err
		}
		defer cc.Close()
	} else if a.opts.token != "" {
		callOpts = append(callOpts, grpc.PerRPCCredentials(tokenCreds(a.opts.token)))
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := reevev1.NewAgentServiceClient(cc).Connect(sctx, callOpts...)
	if err != nil {
		return false, err
	}
	if err := stream.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: a.registration()}}); err != nil {
		return false, recvErr(stream, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	if first.GetRegistered() == nil {
		return false, fmt.Errorf("agentsdk: expected registered, got %T", first.GetMsg())
	}
	a.opts.log.Info("connected", "address", addr, "scheduler_id", first.GetRegistered().GetSchedulerId(), "session_id", first.GetRegistered().GetSessionId())
	return true, a.serve(sctx, cancel, stream)
}

// serve runs a registered stream until it ends.
func (a *Agent) serve(sctx context.Context, cancel context.CancelFunc, stream reevev1.AgentService_ConnectClient) error {
	out := newOutbox(a.opts.resultQueue)
	sendErr := make(chan error, 1)
	sendCtx, stopSend := context.WithCancel(sctx)
	defer stopSend()
	var wg sync.WaitGroup
	wg.Go(func() { sendErr <- sendLoop(sendCtx, stream, out) })
	a.attach(out)
	defer func() {
		a.detach(out)
		out.close()
		cancel()
		wg.Wait()
	}()

	// Set on Drain: the results this stream still owes an answer for.
	var awaiting []string
	drained := false
	var giveUp *time.Timer
	defer func() {
		if giveUp != nil {
			giveUp.Stop()
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil && drained {
			return errDrained // cut after drainAckWait, or by the scheduler
		}
		if err != nil {
			select {
			case serr := <-sendErr:
				if serr != nil && !errors.Is(err, io.EOF) {
					return serr
				}
			default:
			}
			return err
		}
		switch msg := m.GetMsg().(type) {
		case *reevev1.ConnectResponse_Assignment:
			// Even while draining: an assignment sent before the scheduler
			// saw our drain is ours to finish.
			a.start(msg.Assignment)
		case *reevev1.ConnectResponse_Cancel:
			a.cancelStep(msg.Cancel)
		case *reevev1.ConnectResponse_ResultAck:
			a.acked(msg.ResultAck)
		case *reevev1.ConnectResponse_Drain:
			if drained {
				continue
			}
			drained = true
			// Nothing new goes on this stream; what is queued is still
			// sent (the send loop returns once out is empty).
			// A result still waiting for room is not sent here: it goes
			// on the next stream, and no answer for it comes on this one.
			awaiting = out.closeSent(a.detachDrained(out))
			// The scheduler still answers the results sent here: wait for
			// those answers, so that they are not sent again on the next
			// stream, but not for ever.
			giveUp = time.AfterFunc(drainAckWait, cancel)
		}
		if drained && a.answered(awaiting) {
			// CloseSend must not run concurrently with Send: wait for the
			// send loop (a Send stuck on flow control is cut by cancel).
			select {
			case <-sendErr:
				_ = stream.CloseSend()
			case <-time.After(time.Second):
			}
			return errDrained
		}
	}
}

// recvErr returns the stream's status when Send failed because the server
// ended the stream (Send then only says io.EOF).
func recvErr(stream reevev1.AgentService_ConnectClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.Recv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// sendLoop sends what out holds until ctx ends or out is closed and empty
// (drained: everything queued before is sent first).
func sendLoop(ctx context.Context, stream reevev1.AgentService_ConnectClient, out *outbox) error {
	for {
		m, ok := out.next(ctx)
		if !ok {
			return nil
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}

// sdkName is the Go SDK's name in Register.sdk.
const sdkName = "reeve-go"

// registration lists what the agent serves and the executions it still runs
// or has results for, which count against its capacity.
func (a *Agent) registration() *reevev1.Register {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &reevev1.Register{
		AgentId: a.opts.agentID, Namespace: a.opts.namespace, MaxConcurrentSteps: int32(a.opts.maxConcurrent),
		ProtocolVersion: int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1),
		Sdk:             &reevev1.Sdk{Name: sdkName, Version: version.Get().Version},
	}
	for t := range a.handlers {
		r.StepTypes = append(r.StepTypes, t)
	}
	for _, ex := range a.running {
		r.Running = append(r.Running, ex.ref)
	}
	for key, ex := range a.pending {
		if a.running[key] == nil && len(r.Running) < a.opts.maxConcurrent {
			r.Running = append(r.Running, ex.ref)
		}
	}
	return r
}

// attach makes out the current stream and sends what must survive a
// reconnect: unacknowledged results, and our drain if shutting down.
func (a *Agent) attach(out *outbox) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out = out
	for _, ex := range a.running {
		if ex.cutOff != nil {
			ex.cutOff.Stop()
			ex.cutOff = nil
		}
	}
	a.expirePending(time.Now())
	for _, ex := range a.pending {
		out.resend(ex.result)
	}
	if a.draining.Load() {
		a.sendLocked(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Drain{Drain: &reevev1.Drain{Reason: "agent shutting down"}}})
	}
}

// detach ends out's use. Without a stream, an execution whose step sets
// reassign_after_disconnect is canceled once that long has passed with no
// new stream (attach stops the timers): the scheduler that saw the stream
// end re-dispatches it then, and its result would be refused.
func (a *Agent) detach(out *outbox) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.out != out {
		return
	}
	a.out = nil
	for _, ex := range a.running {
		if ex.grace > 0 && ex.cutOff == nil {
			ex.cutOff = time.AfterFunc(ex.grace, func() { a.cutOff(ex) })
		}
	}
}

// detachDrained detaches out after the scheduler sent Drain and returns the
// results sent on it that are not acknowledged yet. After it, nothing writes
// to out (sendLocked writes only to a.out).
func (a *Agent) detachDrained(out *outbox) []string {
	a.detach(out)
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := make([]string, 0, len(a.pending))
	for key := range a.pending {
		keys = append(keys, key)
	}
	return keys
}

// answered reports whether none of keys is still waiting for its ack.
func (a *Agent) answered(keys []string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range keys {
		if a.pending[key] != nil {
			return false
		}
	}
	return true
}

// cutOff cancels an execution cut off from every scheduler for longer than
// its step's reassign_after_disconnect: no result is sent for it.
func (a *Agent) cutOff(ex *execution) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.out != nil || a.running[refKey(ex.ref)] != ex || ex.canceled {
		return // a stream came back, or the handler already returned
	}
	a.opts.log.Warn("step canceled: cut off from the schedulers for longer than its reassign_after_disconnect",
		"task_id", ex.ref.GetTaskId(), "step", ex.ref.GetStep(), "attempt", ex.ref.GetAttempt(), "grace", ex.grace)
	ex.canceled = true
	ex.cancel()
}

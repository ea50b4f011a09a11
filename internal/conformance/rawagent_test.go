package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// bugs are protocol mistakes the raw agent can make on purpose, to show
// that the suite catches each.
type bugs struct {
	lateResults   bool // report after complete_by
	ignoreCancel  bool // report a canceled execution
	forgetPending bool // drop unacknowledged results on reconnect
	resendRefused bool // keep a refused result and send it again
	ignoreDrain   bool // stay on a drained stream
	noHeartbeat   bool // never heartbeat
	newIDs        bool // a new agent id on every connection
	wrongAttempt  bool // report every result as attempt 1
	unknownFatal  bool // end the stream on a message kind it does not know
}

// rawAgent is a second, independent implementation of the protocol from
// the generated stubs only, as an agent in another language would be.
type rawAgent struct {
	addr string
	bug  bugs

	mu      sync.Mutex
	conns   int
	running map[string]*rawExec
	pending map[string]*reevev1.StepResult
	out     chan *reevev1.ConnectRequest // the current stream's, nil between streams
	wg      sync.WaitGroup
}

type rawExec struct {
	ref      *reevev1.StepRef
	cancel   context.CancelFunc
	canceled bool
}

func newRawAgent(addr string, b bugs) *rawAgent {
	return &rawAgent{addr: addr, bug: b, running: map[string]*rawExec{}, pending: map[string]*reevev1.StepResult{}}
}

// run serves until ctx ends, reconnecting after 50ms.
func (a *rawAgent) run(ctx context.Context) {
	defer a.wg.Wait()
	for ctx.Err() == nil {
		_ = a.session(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (a *rawAgent) session(ctx context.Context) error {
	cc, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := reevev1.NewAgentServiceClient(cc).Connect(sctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.conns++
	id := "raw-agent"
	if a.bug.newIDs {
		id = "raw-agent-" + string(rune('a'+a.conns))
	}
	reg := &reevev1.Register{AgentId: id, StepTypes: []string{StepType}, MaxConcurrentSteps: 16,
		ProtocolVersion: int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1), Sdk: &reevev1.Sdk{Name: "conformance-raw-agent", Version: "test"}}
	for _, ex := range a.running {
		reg.Running = append(reg.Running, ex.ref)
	}
	if a.bug.forgetPending {
		clear(a.pending)
	}
	for k, r := range a.pending {
		if a.running[k] == nil {
			reg.Running = append(reg.Running, r.GetRef())
		}
	}
	a.mu.Unlock()
	if err := stream.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: reg}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	out := make(chan *reevev1.ConnectRequest, 256)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-sctx.Done():
				return
			case m := <-out:
				if stream.Send(m) != nil {
					return
				}
			}
		}
	}()
	defer func() { cancel(); <-sent }()
	a.mu.Lock()
	a.out = out
	for _, r := range a.pending {
		out <- &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: r}}
	}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.out = nil
		a.mu.Unlock()
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		switch msg := m.GetMsg().(type) {
		case *reevev1.ConnectResponse_Assignment:
			a.start(ctx, msg.Assignment)
		case *reevev1.ConnectResponse_Cancel:
			a.mu.Lock()
			if ex := a.running[refKey(msg.Cancel.GetRef())]; ex != nil {
				ex.canceled = true
				ex.cancel()
			}
			a.mu.Unlock()
		case *reevev1.ConnectResponse_ResultAck:
			a.mu.Lock()
			if msg.ResultAck.GetAccepted() || !a.bug.resendRefused {
				delete(a.pending, refKey(msg.ResultAck.GetRef()))
			}
			a.mu.Unlock()
		case *reevev1.ConnectResponse_Drain:
			if a.bug.ignoreDrain {
				continue
			}
			a.mu.Lock()
			a.out = nil
			a.mu.Unlock()
			return stream.CloseSend()
		case nil:
			if a.bug.unknownFatal {
				return errors.New("unknown message")
			}
		}
	}
}

func (a *rawAgent) sendLocked(m *reevev1.ConnectRequest) {
	if a.out != nil {
		a.out <- m
	}
}

func (a *rawAgent) start(ctx context.Context, as *reevev1.StepAssignment) {
	key := refKey(as.GetRef())
	by := as.GetCompleteBy().AsTime()
	if a.bug.lateResults {
		by = time.Now().Add(time.Minute)
	}
	ectx, cancel := context.WithDeadline(ctx, by)
	ex := &rawExec{ref: as.GetRef(), cancel: cancel}
	a.mu.Lock()
	a.running[key] = ex
	a.sendLocked(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
	a.mu.Unlock()
	a.wg.Go(func() {
		defer cancel()
		res := a.execute(ectx, as)
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.running, key)
		if (ex.canceled && !a.bug.ignoreCancel) || (!time.Now().Before(as.GetCompleteBy().AsTime()) && !a.bug.lateResults) {
			return
		}
		a.pending[key] = res
		a.sendLocked(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: res}})
	})
}

// execute runs the conformance step as StepConfig says.
func (a *rawAgent) execute(ctx context.Context, as *reevev1.StepAssignment) *reevev1.StepResult {
	ref := as.GetRef()
	if a.bug.wrongAttempt {
		ref = &reevev1.StepRef{Namespace: ref.GetNamespace(), TaskId: ref.GetTaskId(), Step: ref.GetStep(), Attempt: 1}
	}
	res := &reevev1.StepResult{Ref: ref}
	var cfg StepConfig
	b, _ := protojson.Marshal(as.GetConfig())
	_ = json.Unmarshal(b, &cfg)
	switch cfg.Mode {
	case ModeFail:
		res.Outcome = &reevev1.StepResult_Error{Error: &reevev1.StepError{Code: cfg.Error.Code, Message: cfg.Error.Message, NonRetryable: cfg.Error.NonRetryable}}
		return res
	case ModeSleep:
		done := time.After(time.Duration(cfg.SleepMS) * time.Millisecond)
		every := time.Hour
		if hb := as.GetHeartbeatTimeout().AsDuration(); hb > 0 && !a.bug.noHeartbeat {
			every = hb / 3
		}
		beat := time.NewTicker(every)
		defer beat.Stop()
	loop:
		for {
			select {
			case <-ctx.Done():
				if !a.bug.ignoreCancel && !a.bug.lateResults {
					return res
				}
			case <-done:
				break loop
			case <-beat.C:
				a.mu.Lock()
				a.sendLocked(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: []*reevev1.StepRef{as.GetRef()}}}})
				a.mu.Unlock()
			}
		}
	}
	deps := map[string]any{}
	for _, name := range cfg.Deps {
		deps[name] = as.GetDependencyOutputs()[name].AsInterface()
	}
	out, err := structpb.NewValue(map[string]any{
		"input": as.GetInput().AsInterface(), "attempt": float64(ref.GetAttempt()),
		"idempotency_key": as.GetIdempotencyKey(), "compensation": as.GetCompensation(), "deps": deps,
	})
	if err != nil {
		res.Outcome = &reevev1.StepResult_Error{Error: &reevev1.StepError{Message: err.Error()}}
		return res
	}
	res.Outcome = &reevev1.StepResult_Output{Output: out}
	return res
}

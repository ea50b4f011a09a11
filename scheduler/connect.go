package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// agents are the agent streams connected to this scheduler: each stream's
// register and adoption of the attempts it still runs (this file), its
// results (results.go), the executions of a stream that ended
// (heartbeats.go) and the agents' records in etcd (agents.go). Task writes
// go through the engine.
type agents struct {
	opts  *options
	eng   *engine
	disp  *dispatcher
	store *store.Store
	log   *slog.Logger
	logs  *logLimiter
	tel   *instruments
	// base outlives the streams (Server.base); stopping ends when the
	// scheduler starts to stop (the timers of dropped agents' executions
	// stop: heartbeats.go).
	base, stopping context.Context
	work           *workGroup
	lease          func() clientv3.LeaseID // the instance lease, 0 while there is none

	unregistered atomic.Int64  // streams waiting for their Register
	expiries     chan struct{} // one slot per recovery of a dropped agent's execution in flight
	left         leftAttempts  // attempts of ended streams, for the agent's next Register (forgotten.go)
}

// Connect implements AgentService: it serves one agent stream.
func (svc *agentService) Connect(stream reevev1.AgentService_ConnectServer) error {
	return svc.agents.serve(stream)
}

// serve serves one agent stream: a receive loop (this goroutine) and one
// send loop, the only caller of stream.Send. See docs/agent-protocol.md.
func (a *agents) serve(stream reevev1.AgentService_ConnectServer) error {
	first, err := a.awaitRegister(stream)
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "register: the first message of a stream must be register")
	}
	if err := workflow.ValidateRegister(reg); err != nil {
		return statusErr(err)
	}
	reg.Namespace = workflow.Namespace(reg.GetNamespace())
	conn := newAgentConn(uuid.NewString(), reg, a.opts.sendQueueBytes)
	log := a.log.With("agent_id", conn.agentID, "session_id", conn.sessionID)

	if err := a.adoptRunning(stream.Context(), conn, reg.GetRunning()); err != nil {
		// Without knowing which of its attempts are current, the agent's
		// free capacity is unknown: assignments beyond it would be dropped
		// by the agent and wait for their complete-by. It reconnects.
		return statusErr(err)
	}
	if err := a.disp.awaitFlow(stream.Context()); err != nil {
		return statusErr(err)
	}
	conn.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Registered{Registered: a.registered(conn.sessionID)}})
	a.tel.seeNamespace(conn.ns)
	a.disp.addAgent(conn)
	a.forgotten(conn)
	rev := a.publishAgent(stream.Context(), conn)
	log.Info("agent connected", "namespace", conn.ns, "step_types", conn.types, "max_concurrent_steps", conn.max,
		"protocol_version", reg.GetProtocolVersion(), "sdk", reg.GetSdk().GetName(), "sdk_version", reg.GetSdk().GetVersion())

	sendErr := make(chan error, 1)
	var unsent *reevev1.ConnectResponse
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		unsent, err = sendLoop(stream, conn)
		sendErr <- err
	})
	err = a.recvLoop(stream, conn)

	// Before the agent's record goes (orphaned records the disconnect).
	beats, left, newer := a.disp.removeAgent(conn)
	a.orphaned(conn, beats)
	a.ended(conn, left, newer)
	wg.Wait()
	a.disp.takeBackUnsent(conn, unsent)
	// By session, not by rev alone: when the stream connected before the
	// scheduler had a lease (rev 0), republishAgents wrote the record later.
	{
		cctx, cancel := context.WithTimeout(a.base, 2*time.Second)
		if derr := a.store.DeleteAgentSession(cctx, conn.ns, conn.agentID, conn.sessionID); derr != nil {
			log.Debug("remove agent record", "err", derr, "rev", rev)
		}
		cancel()
	}
	log.Info("agent disconnected", "err", err)
	if err == nil {
		err = <-sendErr
	}
	return err
}

// awaitRegister returns the stream's first message. Streams waiting for it
// are capped (RESOURCE_EXHAUSTED past the cap) and each waits at most the
// register timeout (then DEADLINE_EXCEEDED): a client that opens streams
// and never registers cannot hold them, or the server's memory, for ever.
func (a *agents) awaitRegister(stream reevev1.AgentService_ConnectServer) (*reevev1.ConnectRequest, error) {
	if n := a.unregistered.Add(1); n > int64(a.opts.maxUnregistered) {
		a.unregistered.Add(-1)
		return nil, statusErr(status.Errorf(codes.ResourceExhausted, "register: %d streams are already waiting to register (limit %d); retry later", n-1, a.opts.maxUnregistered))
	}
	defer a.unregistered.Add(-1)
	type received struct {
		m   *reevev1.ConnectRequest
		err error
	}
	got := make(chan received, 1)
	// Ends when the handler returns at the latest: gRPC then ends the stream.
	go func() {
		m, err := stream.Recv()
		got <- received{m, err}
	}()
	timer := time.NewTimer(a.opts.registerTimeout)
	defer timer.Stop()
	select {
	case r := <-got:
		return r.m, r.err
	case <-timer.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "register: the first message of a stream must be register, and none arrived within %s", a.opts.registerTimeout)
	}
}

// sendLoop sends conn's queued messages until the stream ends; it returns
// the message a failed Send did not deliver, if any.
func sendLoop(stream reevev1.AgentService_ConnectServer, conn *agentConn) (*reevev1.ConnectResponse, error) {
	for {
		select {
		case <-conn.done:
			return nil, nil
		case q := <-conn.out:
			err := stream.Send(q.m)
			conn.outBytes.Add(-q.size)
			if err != nil {
				return q.m, err
			}
		}
	}
}

// recvLoop handles the agent's messages until the stream ends. It returns nil
// when the agent closed its side.
func (a *agents) recvLoop(stream reevev1.AgentService_ConnectServer, conn *agentConn) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch msg := m.GetMsg().(type) {
		case *reevev1.ConnectRequest_Result:
			// After a stop, no answer: the agent keeps the result and
			// delivers it elsewhere.
			a.work.goOptional(func() {
				ack := a.handleResult(conn, msg.Result)
				if !ack.GetAccepted() && a.base.Err() != nil {
					// Stopped before it could be judged: no answer, so that
					// the agent keeps the result and delivers it elsewhere.
					return
				}
				conn.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_ResultAck{ResultAck: ack}})
			})
		case *reevev1.ConnectRequest_AssignmentAck:
			// The agent took the attempt: it is no longer at risk of being
			// taken back, and an agent marked stuck gets work again.
			a.disp.acked(conn, msg.AssignmentAck.GetRef())
		case *reevev1.ConnectRequest_Heartbeat:
			a.disp.heartbeat(conn, msg.Heartbeat)
		case *reevev1.ConnectRequest_Drain:
			a.disp.setDraining(conn)
		case *reevev1.ConnectRequest_Register:
			return status.Error(codes.FailedPrecondition, "register: already registered on this stream")
		default:
			// A message kind from a newer protocol (or none): ignored, so
			// that a newer agent keeps its stream to an older scheduler.
			a.tel.unknownMessage(stream.Context(), conn.ns)
			a.logs.log(a.log.With("agent_id", conn.agentID, "session_id", conn.sessionID), slog.LevelDebug,
				"unknown agent message", "unknown agent message ignored", "unknown_fields", len(m.ProtoReflect().GetUnknown()))
		}
	}
}

// adoptRunning counts the attempts an agent still runs from an earlier
// connection against its capacity, if they are still current. An attempt
// with a heartbeat timeout costs one write (restoreDeadline: it records the
// adoption, which a scheduler waiting to recover it after the old stream's
// end must see); the checks run concurrently (adoptsInFlight), so a
// reconnect listing thousands of attempts shares group-commit transactions.
func (a *agents) adoptRunning(ctx context.Context, conn *agentConn, refs []*reevev1.StepRef) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, adoptsInFlight)
	)
	for _, ref := range refs {
		if ref.GetNamespace() != conn.ns {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			by, beats, ok, err := a.adoptOne(ctx, conn.agentID, ref)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if ok {
				conn.running[refKey(ref)] = by
				if beats != nil {
					conn.beats[refKey(ref)] = beats
				}
			}
		})
	}
	wg.Wait()
	return first
}

// adoptsInFlight bounds the concurrent checks of one Register.running.
const adoptsInFlight = 256

// adoptOne checks one attempt a reconnecting agent lists: ok when it is
// still current and the agent's, with its complete-by and, for an attempt
// with a heartbeat timeout or a reassign_after_disconnect, its liveness (watched on the new stream).
func (a *agents) adoptOne(ctx context.Context, agentID string, ref *reevev1.StepRef) (by time.Time, b *beat, ok bool, err error) {
	v, err := a.store.GetTask(ctx, ref.GetNamespace(), ref.GetTaskId())
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, nil, false, nil // deleted by retention: not running
	}
	if err != nil {
		return time.Time{}, nil, false, fmt.Errorf("register.running: check %s/%s: %w", ref.GetTaskId(), ref.GetStep(), err)
	}
	st := taskstate.FindStep(v.Record.GetTask(), ref.GetStep())
	if !taskstate.Dispatched(st) || st.GetAttempt() != ref.GetAttempt() || st.GetLockedByAgent() != agentID {
		return time.Time{}, nil, false, nil
	}
	spec := taskstate.Spec(v.Record.GetTask(), ref.GetStep())
	if spec.GetHeartbeatTimeout() == nil && spec.GetReassignAfterDisconnect() == nil {
		return st.GetCompleteBy().AsTime(), nil, true, nil
	}
	by, err = a.eng.restoreDeadline(ctx, ref, agentID)
	if errors.Is(err, taskstate.ErrStale) || errors.Is(err, taskstate.ErrTerminal) || errors.Is(err, taskstate.ErrUnknownStep) || errors.Is(err, store.ErrNotFound) {
		return time.Time{}, nil, false, nil // expired or recovered meanwhile
	}
	if err != nil {
		return time.Time{}, nil, false, fmt.Errorf("register.running: adopt %s/%s: %w", ref.GetTaskId(), ref.GetStep(), err)
	}
	return by, newBeat(ref, spec.GetHeartbeatTimeout(), spec.GetReassignAfterDisconnect(), a.opts.clock.Now()), true, nil
}

// republishAgents writes every connected agent's record again, after the
// instance lease was renewed.
func (a *agents) republishAgents(ctx context.Context) {
	for _, c := range a.disp.connected() {
		a.publishAgent(ctx, c)
	}
}

// publishAgent records the agent in etcd under the instance lease; it
// returns the record's revision, or 0 when it could not be written (the
// record is informational: dispatch does not depend on it).
func (a *agents) publishAgent(ctx context.Context, conn *agentConn) int64 {
	lease := a.lease()
	if lease == 0 {
		return 0
	}
	rev, err := a.store.PutAgent(ctx, &storev1.AgentRecord{
		Namespace: conn.ns, AgentId: conn.agentID, StepTypes: conn.types,
		MaxConcurrentSteps: int32(conn.max), SchedulerId: a.opts.id, SessionId: conn.sessionID,
		ConnectTime: timestamppb.New(a.opts.clock.Now()),
	}, lease)
	if err != nil {
		a.log.Debug("publish agent", "agent_id", conn.agentID, "err", err)
		return 0
	}
	return rev
}

// agentConn is one registered agent stream. Its counters are guarded by the
// dispatcher's lock.
type agentConn struct {
	seq       uint64 // order of registration among this scheduler's streams (addAgent)
	sessionID string
	agentID   string
	ns        string
	types     []string
	max       int

	reserved int                    // claims in flight for this agent
	running  map[string]time.Time   // attempts it runs (refKey) -> complete-by
	unacked  map[string]*pendingAck // sent, not yet acknowledged (refKey)
	beats    map[string]*beat       // attempts with a heartbeat timeout or a reassign_after_disconnect (refKey)
	draining bool                   // the agent asked for no more work
	// stuck: an assignment went unacknowledged past the ack timeout. The
	// agent gets no work but one probe assignment at probeAt; an ack
	// clears it.
	stuck   bool
	probeAt time.Time
	// full: an assignment did not fit the send queue. The agent gets no
	// work until the queue has drained to half its bound.
	full bool

	out      chan queued // drained by the stream's send loop
	outBytes atomic.Int64
	maxBytes int64         // bound of outBytes
	done     chan struct{} // closed when the stream ends
}

// queued is a message waiting for the send loop, with its encoded size.
type queued struct {
	m    *reevev1.ConnectResponse
	size int64
}

// pendingAck is an assignment the agent has not acknowledged yet.
type pendingAck struct {
	ref  *reevev1.StepRef
	sent time.Time
}

func newAgentConn(sessionID string, r *reevev1.Register, maxBytes int64) *agentConn {
	return &agentConn{
		sessionID: sessionID,
		agentID:   r.GetAgentId(),
		ns:        r.GetNamespace(),
		types:     r.GetStepTypes(),
		max:       int(r.GetMaxConcurrentSteps()),
		running:   map[string]time.Time{},
		unacked:   map[string]*pendingAck{},
		beats:     map[string]*beat{},
		// At most max assignments are outstanding, at most max result acks
		// (one per running step's result) and at most max cancels (one per
		// running step): with room for all three an assignment is never
		// dropped because the stream's reader is slow (a dropped one is
		// taken back). Bytes are bounded separately by maxBytes.
		out:      make(chan queued, 3*int(r.GetMaxConcurrentSteps())+64),
		maxBytes: maxBytes,
		done:     make(chan struct{}),
	}
}

func (c *agentConn) free() int {
	if c.draining {
		return 0
	}
	return c.max - c.reserved - len(c.running)
}

// eligible reports whether the agent may be given one more assignment now.
func (c *agentConn) eligible(now time.Time) bool {
	if c.full && c.outBytes.Load() < c.maxBytes/2 {
		c.full = false
	}
	if c.free() <= 0 || c.full || c.outBytes.Load() >= c.maxBytes {
		return false
	}
	return !c.stuck || (!now.Before(c.probeAt) && len(c.unacked) == 0 && c.reserved == 0)
}

// load is what dispatch balances: assignments in flight to the agent and
// not yet acknowledged.
func (c *agentConn) load() int { return c.reserved + len(c.unacked) }

// enqueue hands a message to the send loop without blocking the caller. It
// refuses (false) when the stream ended or its queue is full in messages: a
// stream too slow to take it is as good as gone. Only assignments are also
// bounded in bytes (sendAssignment): the other messages are small, and
// dropping a ResultAck or CancelStep for bytes would cost more than it saves.
func (c *agentConn) enqueue(m *reevev1.ConnectResponse) bool {
	return c.enqueueBounded(m, false)
}

func (c *agentConn) enqueueBounded(m *reevev1.ConnectResponse, bytes bool) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	size := int64(proto.Size(m))
	if n := c.outBytes.Add(size); bytes && n > c.maxBytes && n != size {
		c.outBytes.Add(-size)
		return false
	}
	select {
	case c.out <- queued{m: m, size: size}:
		return true
	default:
		c.outBytes.Add(-size)
		return false
	}
}

// sendAssignment queues an assignment, bounded in bytes too (one is always
// admitted into an empty queue); when it does not fit, the agent is marked
// full. Called with the dispatcher's lock held.
func (c *agentConn) sendAssignment(a *reevev1.StepAssignment) bool {
	if c.enqueueBounded(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: a}}, true) {
		return true
	}
	c.full = true
	return false
}

package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// ackPolicy is how the driver answers a result.
type ackPolicy int

const (
	ackAccept   ackPolicy = iota // accepted=true, like a current execution
	ackRefuse                    // accepted=false, FAILED_PRECONDITION, like a stale one
	ackWithhold                  // no answer (the case breaks the stream)
)

// execution is one assignment the driver made.
type execution struct {
	owner       string // case name
	a           *reevev1.StepAssignment
	policy      ackPolicy
	acked       bool // the agent sent AssignmentAck
	results     []*reevev1.StepResult
	resultTimes []time.Time
	beats       []time.Time
	answered    string // why a result for it may not come again; "" while one may
	forbid      string // why no result may ever come for it; "" when one may
}

// driver runs the cases: it owns the current session and is the only sender.
type driver struct {
	ctx   context.Context
	s     *Suite
	proc  Process
	runID string

	cur          *session
	reg          *reevev1.Register // the first registration
	ns           string
	current      *caseRun
	execs        map[string]*execution
	late         map[string][]string // case name -> violations seen after it ended
	lastReg      *reevev1.Register   // the latest registration
	agentDrained bool                // the agent sent Drain on the current session
}

func newDriver(ctx context.Context, s *Suite, proc Process) *driver {
	return &driver{ctx: ctx, s: s, proc: proc, runID: randomID(), execs: map[string]*execution{}, late: map[string][]string{}}
}

// violation records a protocol violation against the case that owns the
// execution, and against the running case when that is another one.
func (d *driver) violation(owner, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if owner == "" || owner == d.current.name {
		d.current.errorf("%s", msg)
		return
	}
	d.late[owner] = append(d.late[owner], msg+" (seen during "+d.current.name+")")
}

var (
	errTimeout     = errors.New("timed out")
	errStreamEnded = errors.New("stream ended")
)

// session returns the current session, waiting up to timeout for the agent
// to (re)connect when there is none.
func (d *driver) session(timeout time.Duration) (*session, error) {
	if d.cur != nil {
		return d.cur, nil
	}
	return d.accept(timeout)
}

// accept waits for a new stream, checks its Register and answers Registered.
// The previous session, if any, is closed.
func (d *driver) accept(timeout time.Duration) (*session, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var exited <-chan struct{}
	if d.proc != nil {
		exited = d.proc.Exited()
	}
	var s *session
	select {
	case s = <-d.s.srv.h.sessions:
	case <-t.C:
		return nil, fmt.Errorf("the agent did not connect within %v", timeout)
	case <-exited:
		return nil, fmt.Errorf("the agent exited (%v) before connecting", d.proc.Err())
	case <-d.ctx.Done():
		return nil, d.ctx.Err()
	}
	d.closeSession()
	reg := s.first.GetRegister()
	if reg == nil {
		s.close(status.Error(codes.InvalidArgument, "register: the first message of a stream must be register"))
		return nil, fmt.Errorf("first message of the stream is %s, not register", msgName(s.first))
	}
	if err := workflow.ValidateRegister(reg); err != nil {
		s.close(status.Error(codes.InvalidArgument, err.Error()))
		return nil, fmt.Errorf("invalid register (the scheduler would end the stream with INVALID_ARGUMENT): %v", err)
	}
	ns := workflow.Namespace(reg.GetNamespace())
	if d.reg == nil {
		d.reg, d.ns = reg, ns
	} else {
		if reg.GetAgentId() != d.reg.GetAgentId() {
			d.current.errorf("register.agent_id changed on reconnect: %q, then %q (it must be stable for the life of the agent)", d.reg.GetAgentId(), reg.GetAgentId())
		}
		if ns != d.ns {
			d.current.errorf("register.namespace changed on reconnect: %q, then %q", d.ns, ns)
		}
	}
	for _, ref := range reg.GetRunning() {
		ex := d.execs[refKey(ref)]
		switch {
		case ex == nil:
			d.current.errorf("register.running lists %s, which was never assigned", refKey(ref))
		case ex.answered != "":
			d.violation(ex.owner, "register.running lists %s after %s", refKey(ref), ex.answered)
		}
	}
	err := s.stream.Send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Registered{Registered: &reevev1.Registered{
		SessionId: "conformance-" + randomID(), SchedulerId: "conformance",
		ProtocolVersion: int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1), ServerVersion: "conformance",
		// A capability no agent knows: it must be ignored.
		Capabilities: []string{"heartbeat_details", "retry_after", "conformance_future_capability"},
		Limits: &reevev1.AgentLimits{
			MaxOutputBytes: workflow.MaxOutputBytes, MaxErrorMessageBytes: workflow.MaxErrorMessageBytes,
			AckTimeout: durationpb.New(ackTimeout), MaxHeartbeatDetailsBytes: workflow.MaxHeartbeatDetailsBytes,
			MaxRetryAfter: durationpb.New(workflow.MaxRetryAfter),
		},
	}}})
	if err != nil {
		s.close(nil)
		return nil, fmt.Errorf("send registered: %v", err)
	}
	d.cur, d.lastReg, d.agentDrained = s, reg, false
	return s, nil
}

// closeSession ends the current stream, if any, with OK.
func (d *driver) closeSession() {
	if d.cur != nil {
		d.cur.close(nil)
		d.cur = nil
	}
}

// breakSession ends the current stream with UNAVAILABLE, as a crashed
// scheduler or a broken connection would.
func (d *driver) breakSession() {
	if d.cur != nil {
		d.cur.close(status.Error(codes.Unavailable, "conformance: stream broken on purpose"))
		d.cur = nil
	}
}

func (d *driver) send(m *reevev1.ConnectResponse) error {
	if d.cur == nil {
		return errStreamEnded
	}
	if err := d.cur.stream.Send(m); err != nil {
		return fmt.Errorf("send %s: %w", respName(m), err)
	}
	return nil
}

// wait reads the current session's messages, bookkeeping each, until done
// returns true (nil), timeout passes (errTimeout) or the stream ends
// (errStreamEnded; the session is then closed). done may be nil.
func (d *driver) wait(timeout time.Duration, done func(*reevev1.ConnectRequest) bool) error {
	if d.cur == nil {
		return errStreamEnded
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-d.cur.in:
			if !ok {
				d.closeSession()
				return errStreamEnded
			}
			d.observe(m)
			if done != nil && done(m) {
				return nil
			}
		case <-t.C:
			return errTimeout
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
	}
}

// quiet reads messages for d, expecting the stream to stay open.
func (d *driver) quiet(dur time.Duration) error {
	err := d.wait(dur, nil)
	if errors.Is(err, errTimeout) {
		return nil
	}
	return err
}

// observe does the bookkeeping of one message and answers results.
func (d *driver) observe(m *reevev1.ConnectRequest) {
	switch msg := m.GetMsg().(type) {
	case *reevev1.ConnectRequest_AssignmentAck:
		ex := d.execs[refKey(msg.AssignmentAck.GetRef())]
		if ex == nil {
			d.current.errorf("assignment_ack for %s, which was never assigned", refKey(msg.AssignmentAck.GetRef()))
			return
		}
		if len(ex.results) > 0 {
			d.violation(ex.owner, "assignment_ack for %s came after its result", refKey(ex.a.GetRef()))
		}
		ex.acked = true
	case *reevev1.ConnectRequest_Heartbeat:
		if len(msg.Heartbeat.GetRefs()) == 0 {
			d.current.errorf("heartbeat with no refs")
		}
		for _, ref := range msg.Heartbeat.GetRefs() {
			if ex := d.execs[refKey(ref)]; ex != nil {
				ex.beats = append(ex.beats, time.Now())
			}
		}
	case *reevev1.ConnectRequest_Result:
		d.observeResult(msg.Result)
	case *reevev1.ConnectRequest_Drain:
		d.agentDrained = true
	case *reevev1.ConnectRequest_Register:
		d.current.errorf("register sent again on a registered stream (the scheduler ends the stream with FAILED_PRECONDITION)")
	default:
		// A kind from a newer protocol is ignored, as the scheduler does;
		// a message with nothing in it is a bug.
		if len(m.ProtoReflect().GetUnknown()) == 0 {
			d.current.errorf("empty message (no msg set; the scheduler ignores it)")
		}
	}
}

func (d *driver) observeResult(r *reevev1.StepResult) {
	if ack := d.judge(r); ack != nil {
		_ = d.send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_ResultAck{ResultAck: ack}})
	}
}

// judge records a result and returns its ResultAck, or nil when the
// execution's policy is to withhold it.
func (d *driver) judge(r *reevev1.StepResult) *reevev1.ResultAck {
	refuse := func(code codes.Code, msg string) *reevev1.ResultAck {
		return &reevev1.ResultAck{Ref: r.GetRef(), Status: status.New(code, "conformance: "+msg).Proto()}
	}
	if err := workflow.ValidateStepResult(r); err != nil {
		d.current.errorf("invalid result (the scheduler answers INVALID_ARGUMENT): %v", err)
		return refuse(codes.InvalidArgument, err.Error())
	}
	key := refKey(r.GetRef())
	ex := d.execs[key]
	if ex == nil {
		d.current.errorf("result for %s, which was never assigned", key)
		return refuse(codes.FailedPrecondition, "no such execution")
	}
	ex.results = append(ex.results, r)
	ex.resultTimes = append(ex.resultTimes, time.Now())
	switch {
	case ex.forbid != "":
		d.violation(ex.owner, "result for %s sent although %s", key, ex.forbid)
		return refuse(codes.FailedPrecondition, ex.forbid)
	case ex.answered != "":
		d.violation(ex.owner, "result for %s sent again after %s", key, ex.answered)
		return refuse(codes.FailedPrecondition, "duplicate result")
	case !time.Now().Before(ex.a.GetCompleteBy().AsTime()):
		d.violation(ex.owner, "result for %s sent after its complete_by", key)
		return refuse(codes.FailedPrecondition, "past complete_by")
	case !ex.acked:
		d.violation(ex.owner, "result for %s came before its assignment_ack", key)
	}
	switch ex.policy {
	case ackRefuse:
		ex.answered = "it was refused with FAILED_PRECONDITION"
		return refuse(codes.FailedPrecondition, "this attempt is stale")
	case ackWithhold:
		return nil
	}
	ex.answered = "it was acknowledged (accepted)"
	return &reevev1.ResultAck{Ref: r.GetRef(), Accepted: true}
}

// assignment builds an assignment of the conformance step for the current
// case, recorded for bookkeeping; send it with assign.
type assignment struct {
	step       string
	attempt    int32
	cfg        StepConfig
	input      any
	deps       map[string]any
	completeBy time.Time
	heartbeat  time.Duration
	policy     ackPolicy
	comp       bool
	future     bool // carries a field from a newer protocol
}

func (d *driver) assign(a assignment) (*execution, error) {
	if a.attempt == 0 {
		a.attempt = 1
	}
	if a.step == "" {
		a.step = "step"
	}
	ref := &reevev1.StepRef{Namespace: d.ns, TaskId: fmt.Sprintf("conformance-%s-%s", d.runID, d.current.name), Step: a.step, Attempt: a.attempt}
	cfg, err := toValue(a.cfg)
	if err != nil {
		return nil, err
	}
	input, err := structpb.NewValue(a.input)
	if err != nil {
		return nil, err
	}
	as := &reevev1.StepAssignment{
		Ref: ref, Type: StepType, IdempotencyKey: fmt.Sprintf("%s/%s/%s", ref.GetNamespace(), ref.GetTaskId(), ref.GetStep()),
		Input: input, Config: cfg, CompleteBy: timestamppb.New(a.completeBy), Compensation: a.comp,
		TraceContext: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	if a.future {
		withFutureField(as)
	}
	if a.heartbeat > 0 {
		as.HeartbeatTimeout = durationpb.New(a.heartbeat)
	}
	if len(a.deps) > 0 {
		as.DependencyOutputs = map[string]*structpb.Value{}
		for k, v := range a.deps {
			if as.DependencyOutputs[k], err = structpb.NewValue(v); err != nil {
				return nil, err
			}
		}
	}
	ex := &execution{owner: d.current.name, a: as, policy: a.policy}
	d.execs[refKey(ref)] = ex
	if err := d.send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: as}}); err != nil {
		return nil, err
	}
	return ex, nil
}

// assignAcked sends an assignment and waits for its AssignmentAck.
func (d *driver) assignAcked(a assignment) (*execution, error) {
	ex, err := d.assign(a)
	if err != nil {
		return nil, err
	}
	if err := d.waitAck(ex, ackTimeout); err != nil {
		return nil, err
	}
	return ex, nil
}

// waitAck waits for the assignment's AssignmentAck.
func (d *driver) waitAck(ex *execution, timeout time.Duration) error {
	if ex.acked {
		return nil
	}
	err := d.wait(timeout, func(*reevev1.ConnectRequest) bool { return ex.acked })
	if err != nil {
		return d.current.fatalf("no assignment_ack for %s within %v (%v)", refKey(ex.a.GetRef()), timeout, err)
	}
	return nil
}

// waitResult waits for a result of ex on the current session.
func (d *driver) waitResult(ex *execution, timeout time.Duration) (*reevev1.StepResult, error) {
	n := len(ex.results)
	err := d.wait(timeout, func(*reevev1.ConnectRequest) bool { return len(ex.results) > n })
	if err != nil {
		return nil, d.current.fatalf("no result for %s within %v (%v)", refKey(ex.a.GetRef()), timeout, err)
	}
	return ex.results[len(ex.results)-1], nil
}

// checkEcho compares a result with the echo output ex must produce.
func (d *driver) checkEcho(ex *execution, r *reevev1.StepResult, deps map[string]any) {
	if r.GetError() != nil {
		d.current.errorf("result for %s is an error (%s), want the echo output", refKey(ex.a.GetRef()), oneLine(r.GetError()))
		return
	}
	want, err := structpb.NewValue(map[string]any{
		"input": ex.a.GetInput().AsInterface(), "attempt": float64(ex.a.GetRef().GetAttempt()),
		"idempotency_key": ex.a.GetIdempotencyKey(), "compensation": ex.a.GetCompensation(), "deps": orEmpty(deps),
	})
	if err != nil {
		d.current.errorf("build the expected output: %v", err)
		return
	}
	if !proto.Equal(want, r.GetOutput()) {
		d.current.errorf("output of %s is %s, want %s", refKey(ex.a.GetRef()), oneLine(r.GetOutput()), oneLine(want))
	}
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func toValue(v any) (*structpb.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := &structpb.Value{}
	return out, protojson.Unmarshal(b, out)
}

func oneLine(m proto.Message) string {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

func msgName(m *reevev1.ConnectRequest) string {
	if m.GetMsg() == nil {
		return "an empty message"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", m.GetMsg()), "*reevev1.ConnectRequest_")
}

func respName(m *reevev1.ConnectResponse) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", m.GetMsg()), "*reevev1.ConnectResponse_")
}

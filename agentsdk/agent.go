package agentsdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// HandlerFunc runs one execution of a step. ctx carries the values of the
// ctx given to Agent.Run; it ends at the step's complete-by, on CancelStep,
// or when the agent's shutdown timeout passes.
// The returned value is sent as the step's output, JSON-encoded (nil means no
// output; a compensation's output is discarded by the scheduler); a returned
// error fails the attempt (see Permanent and Error). See Typed for handlers
// with typed input and output.
type HandlerFunc func(ctx context.Context, s *Step) (any, error)

// Agent connects to schedulers, runs the steps they assign with the
// registered handlers, and reports the results. Create it with New, register
// handlers with Handle, then call Run once.
type Agent struct {
	addrs    []string
	conn     *grpc.ClientConn // given to NewWithConn; nil: dial addrs
	opts     options
	handlers map[string]HandlerFunc
	started  atomic.Bool
	draining atomic.Bool

	mu      sync.Mutex
	running map[string]*execution // by refKey: handlers not yet returned
	pending map[string]*execution // by refKey: results not yet acknowledged
	out     *outbox               // the current stream's; nil while disconnected
	idle    chan struct{}         // closed and replaced when running and pending empty
	base    context.Context
	wg      sync.WaitGroup
}

// execution is one assignment the agent took.
type execution struct {
	ref        *reevev1.StepRef
	typ        string // the step type, for the log
	compensate bool   // a compensation, for the log
	completeBy time.Time
	cancel     context.CancelFunc
	canceled   bool
	result     *reevev1.StepResult
	lastBeat   time.Time
	beatEvery  time.Duration // heartbeats are coalesced to one per beatEvery
	// details are the handler's latest heartbeat details not sent yet (nil:
	// none, or sent).
	details *structpb.Value
	// grace is the step's reassign_after_disconnect (0: unset); cutOff
	// fires that long after the agent lost its stream, unless it got one
	// back (see detach).
	grace  time.Duration
	cutOff *time.Timer
}

// New returns an agent for the schedulers at addresses (host:port); it
// connects to one at a time, starting at a random one (so agents given the
// same list spread over the schedulers) and moving to the next on failure
// or drain.
func New(addresses []string, opts ...Option) (*Agent, error) {
	if len(addresses) == 0 {
		return nil, errors.New("agentsdk: at least one scheduler address is required")
	}
	return newAgent(append([]string(nil), addresses...), nil, opts)
}

// NewWithConn returns an agent that opens its streams on cc, a connection
// the caller made (with its own credentials, interceptors, resolver and
// load balancing) and closes after Run returned; the agent never closes it.
// Every reconnect opens a new stream on cc. WithDialOptions, WithTLS and
// WithTLSFiles do not apply (NewWithConn refuses them): configure cc instead;
// WithToken still sends its token on each stream (cc must use TLS), and the
// agent's gRPC spans and metrics are cc's stats handlers'.
func NewWithConn(cc *grpc.ClientConn, opts ...Option) (*Agent, error) {
	if cc == nil {
		return nil, errors.New("agentsdk: connection is nil")
	}
	return newAgent([]string{cc.Target()}, cc, opts)
}

func newAgent(addrs []string, cc *grpc.ClientConn, opts []Option) (*Agent, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxConcurrent < 1 {
		return nil, fmt.Errorf("agentsdk: max concurrent steps must be at least 1, got %d", o.maxConcurrent)
	}
	if o.resultQueue == 0 {
		o.resultQueue = o.maxConcurrent
	}
	if o.resultQueue < 1 {
		return nil, fmt.Errorf("agentsdk: result queue must be at least 1, got %d", o.resultQueue)
	}
	if cc != nil && (o.tls != nil || o.tlsFiles != nil || o.dialOptsSet) {
		return nil, errors.New("agentsdk: WithDialOptions, WithTLS and WithTLSFiles do not apply to an agent on an existing connection: configure the connection")
	}
	if f := o.tlsFiles; f != nil {
		cfg, err := tlsconfig.ClientWithLogger(tlsconfig.Files{CA: f.CA, Cert: f.Cert, Key: f.Key}, f.ServerName, o.log)
		if err != nil {
			return nil, fmt.Errorf("agentsdk: TLS files: %w", err)
		}
		o.tls = cfg
	}
	return &Agent{
		addrs:    addrs,
		conn:     cc,
		opts:     o,
		handlers: map[string]HandlerFunc{},
		running:  map[string]*execution{},
		pending:  map[string]*execution{},
		idle:     make(chan struct{}),
	}, nil
}

// ID returns the agent's id.
func (a *Agent) ID() string { return a.opts.agentID }

// Handle registers h for steps of stepType. Call it before Run; it panics on
// a duplicate type or after Run started, like http.HandleFunc.
func (a *Agent) Handle(stepType string, h HandlerFunc) {
	if a.started.Load() {
		panic("agentsdk: Handle called after Run")
	}
	if _, dup := a.handlers[stepType]; dup {
		panic("agentsdk: duplicate handler for step type " + stepType)
	}
	a.handlers[stepType] = h
}

// Run connects and serves steps until ctx ends, then shuts down gracefully:
// it tells the scheduler to send nothing more, lets running steps finish
// (each bounded by its complete-by and all by the shutdown timeout),
// delivers their results, and returns nil. It returns an error at once if
// the scheduler refuses the registration (e.g. an invalid step type).
//
// Handlers' contexts carry ctx's values, as the worker context of other
// SDKs does, but not its cancellation or deadline: each execution's ctx ends
// on its own (complete-by, CancelStep, cut off from the schedulers) or when
// the shutdown timeout passes after ctx ended.
func (a *Agent) Run(ctx context.Context) error {
	if len(a.handlers) == 0 {
		return errors.New("agentsdk: no handlers registered")
	}
	if a.started.Swap(true) {
		return errors.New("agentsdk: Run called twice")
	}
	// Handlers see ctx's values (request-scoped loggers, tenant, test
	// hooks) but not its end: that starts the graceful shutdown, which
	// lets them finish.
	base, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	a.mu.Lock()
	a.base = base
	a.mu.Unlock()

	connCtx, stopConn := context.WithCancel(context.Background())
	defer stopConn()
	fatal := make(chan error, 1)
	var connWG sync.WaitGroup
	connWG.Go(func() { fatal <- a.connectLoop(connCtx) })

	var err error
	select {
	case <-ctx.Done():
		a.shutdown()
	case err = <-fatal:
	}
	cancelHandlers()
	stopConn()
	connWG.Wait()
	a.wg.Wait()
	return err
}

// shutdown drains: no new work, wait for running steps and acks.
func (a *Agent) shutdown() {
	a.draining.Store(true)
	a.send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Drain{Drain: &reevev1.Drain{Reason: "agent shutting down"}}})
	timeout := time.NewTimer(a.opts.shutdownTimeout)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		a.expirePending(time.Now())
		done := len(a.running) == 0 && len(a.pending) == 0
		idle := a.idle
		a.mu.Unlock()
		if done {
			return
		}
		select {
		case <-idle:
		case <-timeout.C:
			a.opts.log.Warn("shutdown timeout: canceling running steps")
			return
		case <-time.After(100 * time.Millisecond): // pending results expire by time
		}
	}
}

// start runs an assignment unless the agent cannot take it.
func (a *Agent) start(as *reevev1.StepAssignment) {
	ref := as.GetRef()
	key := refKey(ref)
	h, ok := a.handlers[as.GetType()]
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !ok:
		a.opts.log.Error("assignment for a step type without handler", "type", as.GetType(), "task_id", ref.GetTaskId(), "step", ref.GetStep())
		return
	case a.running[key] != nil || a.pending[key] != nil:
		return // a duplicate delivery of an execution already taken
	case len(a.running) >= a.opts.maxConcurrent:
		a.opts.log.Error("assignment over capacity dropped", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt())
		return
	}
	a.sendLocked(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: ref}}})
	completeBy := as.GetCompleteBy().AsTime()
	ctx, cancel := context.WithDeadline(a.base, completeBy)
	ex := &execution{ref: ref, typ: as.GetType(), compensate: as.GetCompensation(), completeBy: completeBy, cancel: cancel, beatEvery: time.Second,
		grace: as.GetReassignAfterDisconnect().AsDuration()}
	if hb := as.GetHeartbeatTimeout().AsDuration(); hb > 0 {
		ex.beatEvery = min(ex.beatEvery, hb/3)
	}
	a.running[key] = ex
	step := newStep(as)
	step.agent = a
	ctx, span := a.startSpan(ctx, as)
	a.wg.Go(func() {
		defer cancel()
		out, err := invoke(ctx, h, step)
		endSpan(span, err)
		a.finish(ctx, ex, out, err)
	})
}

// invoke calls the handler, turning a panic into a retryable error.
func invoke(ctx context.Context, h HandlerFunc, s *Step) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Error{Code: "panic", Message: fmt.Sprintf("handler panicked: %v\n%s", r, debug.Stack())}
		}
	}()
	return h(ctx, s)
}

// finish records a handler's outcome and sends it, unless the execution was
// canceled or its complete-by passed: then nothing is ever sent for it. When
// the stream's result queue is full it waits for room (back-pressure) until
// ctx (the handler's) ends; a result not queued then stays pending and is
// sent on the next stream, or expires at its complete-by.
func (a *Agent) finish(ctx context.Context, ex *execution, out any, herr error) {
	res, ob := a.record(ex, out, herr)
	if res == nil || ob == nil {
		return
	}
	if err := ob.putResult(ctx, res); err != nil && !errors.Is(err, errOutboxClosed) {
		a.opts.log.Warn("result not queued before the step's ctx ended; it is sent on the next stream if still in time",
			"task_id", ex.ref.GetTaskId(), "step", ex.ref.GetStep(), "attempt", ex.ref.GetAttempt(), "err", err)
	}
}

// record moves a returned execution from running to pending and returns its
// result and the stream to send it on (nil: none now; attach sends it).
func (a *Agent) record(ex *execution, out any, herr error) (*reevev1.StepResult, *outbox) {
	key := refKey(ex.ref)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, key)
	if ex.cutOff != nil {
		ex.cutOff.Stop()
	}
	defer a.signalIdle()
	if ex.canceled || !time.Now().Before(ex.completeBy) {
		a.opts.log.Info("no result sent: step canceled or past its complete-by", "task_id", ex.ref.GetTaskId(), "step", ex.ref.GetStep(), "attempt", ex.ref.GetAttempt())
		return nil, nil
	}
	res := result(ex.ref, out, herr)
	if se := res.GetError(); se != nil {
		a.logFailure(ex, se)
	}
	if ex.details != nil && res.GetError() != nil && a.out != nil {
		// Details a coalesced heartbeat held back: heartbeats go out before
		// results, so the next attempt gets them.
		a.out.beat(ex.ref, ex.details)
	}
	ex.result = res
	a.pending[key] = ex
	return res, a.out
}

// logFailure says at WARN that an execution failed, with what the scheduler
// is told: the code ("panic" for a handler that panicked, "bad_input" for a
// typed handler's input that did not decode), the step type, the step and
// the message.
func (a *Agent) logFailure(ex *execution, se *reevev1.StepError) {
	a.opts.log.Warn("step failed", "code", se.GetCode(), "type", ex.typ, "task_id", ex.ref.GetTaskId(), "step", ex.ref.GetStep(),
		"attempt", ex.ref.GetAttempt(), "namespace", ex.ref.GetNamespace(), "compensation", ex.compensate,
		"non_retryable", se.GetNonRetryable(), "message", se.GetMessage())
}

// result is what the agent sends for a handler's outcome.
func result(ref *reevev1.StepRef, out any, herr error) *reevev1.StepResult {
	if d := deferredResult(ref, herr); d != nil { // defer.go
		return d
	}
	res := &reevev1.StepResult{Ref: ref}
	if herr == nil {
		v, err := encodeOutput(out)
		if err != nil {
			herr = Permanent(err)
		}
		if v != nil {
			res.Outcome = &reevev1.StepResult_Output{Output: v}
		}
	}
	if herr != nil {
		res.Outcome = &reevev1.StepResult_Error{Error: stepError(herr)}
	}
	return res
}

// The scheduler's bounds (Registered.limits): a step error's message and
// details, and heartbeat details, in bytes; a step error's retry_after.
const (
	maxErrorMessage = 4096
	maxDetails      = 4096
	maxRetryAfter   = 24 * time.Hour
)

// stepError is the StepError of a handler's error. The code of an *Error
// is sent in its own field, not again in the message: an Error{Code:
// "card_declined", Message: "m"} wrapped as "charge: %w" sends the message
// "charge: m".
func stepError(err error) *reevev1.StepError {
	msg := err.Error()
	var e *Error
	if errors.As(err, &e) && e.Code != "" {
		msg = strings.Replace(msg, e.Error(), e.Message, 1)
	}
	se := &reevev1.StepError{Message: truncate(msg, maxErrorMessage), NonRetryable: IsPermanent(err)}
	if e != nil {
		se.Code = strings.ToValidUTF8(e.Code, "\uFFFD")
		if v, err := encodeOutput(e.Details); err == nil && proto.Size(v) <= maxDetails {
			se.Details = v
		}
		if e.RetryAfter > 0 {
			se.RetryAfter = durationpb.New(min(e.RetryAfter, maxRetryAfter))
		}
	}
	return se
}

// truncate returns s as valid UTF-8 (invalid bytes replaced by U+FFFD: gRPC
// refuses to send a string that is not) in at most n bytes, cut on a
// character boundary.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// acked drops a result the scheduler answered.
func (a *Agent) acked(ack *reevev1.ResultAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := refKey(ack.GetRef())
	if _, ok := a.pending[key]; !ok {
		return
	}
	delete(a.pending, key)
	a.signalIdle()
	if !ack.GetAccepted() {
		a.opts.log.Info("result refused", "task_id", ack.GetRef().GetTaskId(), "step", ack.GetRef().GetStep(),
			"attempt", ack.GetRef().GetAttempt(), "code", codes.Code(ack.GetStatus().GetCode()), "reason", ack.GetStatus().GetMessage())
	}
}

// cancelStep stops an execution the scheduler took away.
func (a *Agent) cancelStep(c *reevev1.CancelStep) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := refKey(c.GetRef())
	if ex := a.running[key]; ex != nil {
		ex.canceled = true
		ex.cancel()
	}
	if _, ok := a.pending[key]; ok {
		delete(a.pending, key)
		a.signalIdle()
	}
}

// expirePending drops unacknowledged results past their complete-by: they
// may no longer be sent. Caller holds mu.
func (a *Agent) expirePending(now time.Time) {
	for key, ex := range a.pending {
		if !now.Before(ex.completeBy) {
			delete(a.pending, key)
		}
	}
	a.signalIdle()
}

// signalIdle wakes shutdown when nothing is left. Caller holds mu.
func (a *Agent) signalIdle() {
	if len(a.running) == 0 && len(a.pending) == 0 {
		close(a.idle)
		a.idle = make(chan struct{})
	}
}

// heartbeat queues a heartbeat for a running execution, at most one per
// beatEvery; never dropped, merged with others not yet sent. details (nil:
// none) go with the next heartbeat sent, or before the execution's failure.
func (a *Agent) heartbeat(ref *reevev1.StepRef, details *structpb.Value) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ex := a.running[refKey(ref)]
	if ex == nil {
		return
	}
	if details != nil {
		ex.details = details
	}
	if a.out == nil || time.Since(ex.lastBeat) < ex.beatEvery {
		return
	}
	ex.lastBeat = time.Now()
	a.out.beat(ref, ex.details)
	ex.details = nil
}

func (a *Agent) send(m *reevev1.ConnectRequest) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sendLocked(m)
}

// sendLocked queues an ack or a drain on the current stream, if connected;
// it never blocks and never drops (see outbox). What must survive a
// reconnect is sent again by attach. Caller holds mu.
func (a *Agent) sendLocked(m *reevev1.ConnectRequest) {
	if a.out != nil {
		a.out.push(m)
	}
}

func refKey(r *reevev1.StepRef) string {
	return fmt.Sprintf("%s/%s/%s/%d", r.GetNamespace(), r.GetTaskId(), r.GetStep(), r.GetAttempt())
}

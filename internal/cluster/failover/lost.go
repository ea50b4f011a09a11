package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
)

// heartbeatWorkflow has one step that heartbeats until it is canceled; its
// complete-by (1 minute) is far beyond the heartbeat timeout.
const heartbeatWorkflow = "failover.heartbeat"

// HeartbeatTimeout is the heartbeat timeout of the lost-agent round's step.
const HeartbeatTimeout = time.Second

// SchedulerSessionTTL is the TTL of a `reeve scheduler`'s lease, under which
// its agents' records live (scheduler.WithSessionTTL's default; the command
// has no flag for it).
const SchedulerSessionTTL = 10

// LostAgent is one round where an agent running heartbeat steps and the
// scheduler it is connected to are lost together: the scheduler is
// SIGKILLed and, at the same moment, the agent is cut off for good (its
// only address, a proxy in this process, closes: as if SIGKILLed, it
// never reconnects).
type LostAgent struct {
	Round  int    `json:"round"`
	Killed string `json:"killed"`
	Steps  int    `json:"steps"`
	// HeartbeatTimeoutMs is the steps' heartbeat timeout; the agent beats
	// at least every third of it, so its last beat was at most that long
	// before the kill.
	HeartbeatTimeoutMs float64 `json:"heartbeat_timeout_ms"`
	// SchedulerTTLSec is the killed scheduler's session TTL.
	SchedulerTTLSec int `json:"scheduler_ttl_s"`
	// AgentLostMs: kill → the supervisor's AGENT_LOST decision (history
	// step.agent_disconnected by supervisor/<id>) for the first step;
	// ExpiredMs: kill → the step expired (step.expired) and
	// RedispatchMs: kill → attempt 2 dispatched, first and last step.
	AgentLostMs      float64 `json:"agent_lost_ms"`
	ExpiredMs        float64 `json:"expired_ms"`
	RedispatchMs     float64 `json:"redispatch_ms"`
	LastRedispatchMs float64 `json:"last_redispatch_ms"`
	// TargetMs is issue 13's heartbeat timeout + 200 ms after the last beat
	// (measured here from the kill, which is after the last beat).
	TargetMs float64 `json:"target_ms"`
	Met      bool    `json:"met"`
}

// LostAgentRound registers failover.heartbeat, starts an agent in this
// process connected (through a proxy) to the scheduler most agents use,
// submits steps tasks, waits until each step runs and has heartbeated, then
// SIGKILLs that scheduler and cuts the agent off. A healthy agent is started
// on the other scheduler and the round waits until every step ran again
// there. The killed scheduler is started again.
func (m *Measurer) LostAgentRound(ctx context.Context, round, steps int) (LostAgent, error) {
	r := LostAgent{Round: round, Steps: steps, HeartbeatTimeoutMs: ms(HeartbeatTimeout), SchedulerTTLSec: SchedulerSessionTTL,
		TargetMs: ms(HeartbeatTimeout + 200*time.Millisecond)}
	if err := m.WaitReady(ctx); err != nil {
		return r, err
	}
	vi := round % len(m.c.Schedulers)
	victim := m.c.Schedulers[vi]
	r.Killed = victim.Name
	client := m.clients[(vi+1)%len(m.clients)]
	wf := &reevev1.Workflow{Name: heartbeatWorkflow, Description: "failover measurement: a step that heartbeats until canceled",
		Steps: []*reevev1.StepSpec{{Name: "beat", Type: "failover.beat", Timeout: durationpb.New(time.Minute),
			HeartbeatTimeout: durationpb.New(HeartbeatTimeout),
			RetryPolicy:      &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(10 * time.Millisecond)}}}}
	if _, err := client.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		return r, fmt.Errorf("register %s: %w", heartbeatWorkflow, err)
	}

	proxy, err := newCutProxy(victim.Addr)
	if err != nil {
		return r, err
	}
	defer proxy.cut()
	var mu sync.Mutex
	beats := map[string]int{}
	// Closed once the agent is cut off: its handlers end (as a killed
	// process's would), so that stopping it does not wait for them.
	gone := make(chan struct{})
	beating := func(ctx context.Context, s *agentsdk.Step) (any, error) {
		for {
			_ = s.Heartbeat(ctx)
			mu.Lock()
			beats[s.TaskID]++
			mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-gone:
				return nil, errors.New("agent cut off")
			case <-time.After(HeartbeatTimeout / 10):
			}
		}
	}
	lost, err := agentsdk.New([]string{proxy.addr()}, append(m.agentOpts, agentsdk.WithAgentID(fmt.Sprintf("failover-lost-%d-%d", time.Now().UnixNano(), round)),
		agentsdk.WithLogger(slog.New(slog.DiscardHandler)), agentsdk.WithReconnectBackoff(50*time.Millisecond, time.Second),
		// Cut off, it can never deliver its results: stopping it waits for nothing.
		agentsdk.WithShutdownTimeout(time.Millisecond))...)
	if err != nil {
		return r, err
	}
	lost.Handle("failover.beat", beating)
	lctx, stopLost := context.WithCancel(ctx)
	defer stopLost()
	lostDone := make(chan struct{})
	go func() {
		defer close(lostDone)
		_ = lost.Run(lctx)
	}()
	defer func() {
		stopLost()
		<-lostDone
	}()

	ids := make([]string, steps)
	stamp := time.Now().UnixNano()
	for i := range ids {
		ids[i] = fmt.Sprintf("failover-lost-%d-%d-%d", stamp, round, i)
		if _, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: ids[i],
			Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: heartbeatWorkflow}}}); err != nil {
			return r, fmt.Errorf("submit %s: %w", ids[i], err)
		}
	}
	// Every step runs on the doomed agent and has beaten a few times.
	if err := poll(ctx, "heartbeat steps running", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if beats[id] < 5 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return r, err
	}

	killed := time.Now()
	if err := victim.Kill(); err != nil {
		return r, err
	}
	proxy.cut()
	close(gone)

	healthy, err := agentsdk.New([]string{m.c.SchedulerAddrs[(vi+1)%len(m.c.SchedulerAddrs)]}, append(m.agentOpts, agentsdk.WithAgentID(fmt.Sprintf("failover-healthy-%d-%d", stamp, round)),
		agentsdk.WithLogger(slog.New(slog.DiscardHandler)), agentsdk.WithShutdownTimeout(5*time.Second))...)
	if err != nil {
		return r, err
	}
	healthy.Handle("failover.beat", func(context.Context, *agentsdk.Step) (any, error) { return map[string]bool{"ok": true}, nil })
	hctx, stopHealthy := context.WithCancel(ctx)
	healthyDone := make(chan struct{})
	go func() {
		defer close(healthyDone)
		_ = healthy.Run(hctx)
	}()
	defer func() {
		stopHealthy()
		<-healthyDone
	}()

	wctx, cancel := context.WithTimeout(ctx, SchedulerSessionTTL*time.Second+time.Minute)
	defer cancel()
	var firstLost, firstExp, first, last time.Time
	for _, id := range ids {
		if err := m.waitSucceeded(wctx, id); err != nil {
			return r, err
		}
		t, err := m.getTask(wctx, id)
		if err != nil {
			return r, err
		}
		var lostAt, exp, dis time.Time
		for _, e := range t.GetHistory() {
			at := e.GetTime().AsTime()
			_, bySup := actorIs(e.GetActor(), "supervisor")
			switch {
			case bySup && e.GetKind() == "step.agent_disconnected" && e.GetAttempt() == 1:
				lostAt = at
			case e.GetKind() == "step.expired" && e.GetAttempt() == 1:
				exp = at
			case e.GetKind() == "step.dispatched" && e.GetAttempt() == 2:
				dis = at
			}
		}
		if exp.IsZero() || dis.IsZero() {
			return r, fmt.Errorf("failover: %s succeeded without attempt 1 expiring and attempt 2 dispatched", id)
		}
		if !lostAt.IsZero() && (firstLost.IsZero() || lostAt.Before(firstLost)) {
			firstLost = lostAt
		}
		if firstExp.IsZero() || exp.Before(firstExp) {
			firstExp = exp
		}
		if first.IsZero() || dis.Before(first) {
			first = dis
		}
		if dis.After(last) {
			last = dis
		}
	}
	if !firstLost.IsZero() {
		r.AgentLostMs = ms(firstLost.Sub(killed))
	}
	r.ExpiredMs, r.RedispatchMs, r.LastRedispatchMs = ms(firstExp.Sub(killed)), ms(first.Sub(killed)), ms(last.Sub(killed))
	r.Met = r.RedispatchMs <= r.TargetMs
	if err := victim.Start(); err != nil {
		return r, err
	}
	return r, cluster.WaitServing(ctx, victim.Addr, m.dial...)
}

// cutProxy forwards TCP connections to target until cut, which closes the
// listener and every connection: to a client the target vanished and
// cannot be reached again. retarget sends later connections elsewhere.
type cutProxy struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newCutProxy(target string) (*cutProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{l: l, target: target}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

// retarget forwards the connections accepted from now on to target; those
// open stay where they are.
func (p *cutProxy) retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *cutProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(out, in); _ = out.Close() })
		p.wg.Go(func() { _, _ = io.Copy(in, out); _ = in.Close() })
	}
}

// cut closes everything and waits for the copying goroutines; it may be
// called more than once.
func (p *cutProxy) cut() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.l.Close()
		for _, c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

package failover

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// holdWorkflow has one step that the scheduler round's held agent runs and
// keeps open until released: the attempt in flight at the kill, by
// construction rather than by the luck of the load's timing.
const holdWorkflow = "failover.hold"

// holdTimeout is the held step's complete-by: far beyond the round, so that
// nothing but its own result ends the attempt.
const holdTimeout = 2 * time.Minute

// heldAttempt is one attempt dispatched by the scheduler to be killed and
// held open by an agent of this process until release.
type heldAttempt struct {
	taskID  string
	agentID string
	proxy   *cutProxy
	release chan struct{}
	stop    func() // stops the agent and the proxy
}

// holdAttempt registers failover.hold (through client: in a secure cluster
// agents may not) and starts an agent of this process (with the Agent
// certificate in a secure cluster) whose only address is a proxy to
// victim, so that the victim dispatches its step; the proxy sends later
// connections to the survivor (retarget), so that after the kill the agent
// reconnects there. It submits one task through client and returns once
// its step's handler runs (attempt 1, dispatched by victim), holding it
// until release is closed.
func (m *Measurer) holdAttempt(ctx context.Context, round int, victim string, victimAddr string, client reevev1.SchedulerServiceClient) (*heldAttempt, error) {
	wf := &reevev1.Workflow{Name: holdWorkflow, Description: "failover measurement: a step held open across a scheduler's kill",
		Steps: []*reevev1.StepSpec{{Name: "hold", Type: holdWorkflow, Timeout: durationpb.New(holdTimeout),
			RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(10 * time.Millisecond)}}}}
	if _, err := client.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		return nil, fmt.Errorf("register %s: %w", holdWorkflow, err)
	}
	proxy, err := newCutProxy(victimAddr)
	if err != nil {
		return nil, err
	}
	stamp := time.Now().UnixNano()
	h := &heldAttempt{taskID: fmt.Sprintf("failover-held-%d-%d", stamp, round), agentID: fmt.Sprintf("failover-held-%d-%d", stamp, round),
		proxy: proxy, release: make(chan struct{})}
	started := make(chan int, 1)
	a, err := agentsdk.New([]string{proxy.addr()}, append(slices.Clone(m.agentOpts), agentsdk.WithAgentID(h.agentID),
		agentsdk.WithLogger(slog.New(slog.DiscardHandler)), agentsdk.WithReconnectBackoff(50*time.Millisecond, time.Second),
		agentsdk.WithShutdownTimeout(5*time.Second))...)
	if err != nil {
		proxy.cut()
		return nil, err
	}
	a.Handle(holdWorkflow, func(ctx context.Context, s *agentsdk.Step) (any, error) {
		select {
		case started <- s.Attempt:
		default:
		}
		select {
		case <-h.release:
			return map[string]bool{"held": true}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	actx, stopAgent := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(actx)
	}()
	h.stop = func() {
		h.finish()
		stopAgent()
		<-done
		proxy.cut()
	}

	if _, err := client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: h.taskID,
		Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: holdWorkflow}}}); err != nil {
		h.stop()
		return nil, fmt.Errorf("submit %s: %w", h.taskID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case attempt := <-started:
		if attempt != 1 {
			h.stop()
			return nil, fmt.Errorf("failover: held step of %s started on attempt %d, want 1", h.taskID, attempt)
		}
	case <-wctx.Done():
		h.stop()
		return nil, fmt.Errorf("failover: the held step of %s did not start within a minute: %w", h.taskID, wctx.Err())
	}
	// Only the victim can have dispatched it (the agent's only connection
	// goes there); the history says so, or the round is void.
	t, err := m.getTask(ctx, h.taskID)
	if err != nil {
		h.stop()
		return nil, err
	}
	if by := dispatcher(t, "hold", 1); by != victim {
		h.stop()
		return nil, fmt.Errorf("failover: held step of %s dispatched by %q, want %s", h.taskID, by, victim)
	}
	return h, nil
}

// finish releases the held attempt; it may be called more than once (by
// the round's goroutine only).
func (h *heldAttempt) finish() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// dispatcher returns the id of the scheduler that dispatched attempt of
// step, from the task's history ("" if none did).
func dispatcher(t *reevev1.Task, step string, attempt int32) string {
	for _, e := range t.GetHistory() {
		if sched, ok := actorIs(e.GetActor(), "scheduler"); ok && e.GetKind() == "step.dispatched" && e.GetStep() == step && e.GetAttempt() == attempt {
			return sched
		}
	}
	return ""
}

// waitRegistered waits until the agent's record names the scheduler sched
// (it registered there).
func (m *Measurer) waitRegistered(ctx context.Context, agent, sched string) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll(wctx, agent+" registered with "+sched, func(ctx context.Context) (bool, error) {
		p, _, err := m.placement(ctx)
		return err == nil && p[agent] == sched, err
	})
}

// heldOutcome waits until the held task ends and reports whether its result
// was accepted after killed, on attempt 1, from the held agent; why says
// what happened otherwise.
func (m *Measurer) heldOutcome(ctx context.Context, h *heldAttempt, killed time.Time) (accepted bool, why string, err error) {
	wctx, cancel := context.WithTimeout(ctx, holdTimeout+time.Minute)
	defer cancel()
	var t *reevev1.Task
	if err := poll(wctx, h.taskID+" terminal", func(ctx context.Context) (bool, error) {
		var err error
		t, err = m.getTask(ctx, h.taskID)
		return err == nil && terminal(t.GetState()), err
	}); err != nil {
		return false, "", err
	}
	s := t.GetSteps()[0]
	for _, e := range t.GetHistory() {
		agent, ok := actorIs(e.GetActor(), "agent")
		if ok && agent == h.agentID && e.GetKind() == "step.succeeded" && e.GetAttempt() == 1 && e.GetTime().AsTime().After(killed) {
			accepted = true
		}
	}
	if accepted && t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED && s.GetAttempt() == 1 {
		return true, "", nil
	}
	return false, fmt.Sprintf("task %v, step %v on attempt %d; %s", t.GetState(), s.GetState(), s.GetAttempt(), describeAttempt(t, "hold", 1, killed)), nil
}

package workload

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// WorkflowWait is the chaos workflow that waits (issue 35): a (an agent's
// step, compensable) → approve (waitFor external, completed by the load by
// token or by name, or never: its complete-by passes, it waits again once,
// then the task is compensated) → nap (a sleep step) → hook (an agent's
// step that the chaos agent defers, completed by the load with its token).
// Escalation compensate everywhere; the task's deadline, when a
// submission sets one, compensates it too.
const WorkflowWait = "chaos.wait"

// Steps of WorkflowWait.
const (
	WaitStepFirst   = "a"
	WaitStepApprove = "approve"
	WaitStepNap     = "nap"
	WaitStepHook    = "hook"
)

// HookType is the type of the step the chaos agent defers.
const HookType = "chaos.hook"

// Timing of WorkflowWait: ApproveTimeout is the approve step's complete-by
// (two attempts: an unanswered wait expires twice), NapSleep the sleep,
// HookTimeout the deferred hook's complete-by.
const (
	ApproveTimeout  = 5 * time.Second
	ApproveAttempts = 2
	NapSleep        = time.Second
	HookTimeout     = 6 * time.Second
)

// waitWorkflow is WorkflowWait's definition.
func waitWorkflow(retry, undoRetry *reevev1.RetryPolicy) *reevev1.Workflow {
	comp := reevev1.Escalation_ESCALATION_COMPENSATE
	return &reevev1.Workflow{Name: WorkflowWait, Description: "Chaos suite: an agent's step, a wait for a completion from outside, a sleep, and a step its agent defers.",
		Steps: []*reevev1.StepSpec{
			{Name: WaitStepFirst, Type: "chaos.work", Timeout: durationpb.New(stepTimeout), RetryPolicy: retry, Escalation: comp,
				ReassignAfterDisconnect: durationpb.New(reassignAfter),
				Compensation:            &reevev1.CompensationSpec{Type: "chaos.undo", Timeout: durationpb.New(stepTimeout), RetryPolicy: undoRetry}},
			{Name: WaitStepApprove, WaitFor: "external", DependsOn: []string{WaitStepFirst}, Timeout: durationpb.New(ApproveTimeout), Escalation: comp,
				RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: ApproveAttempts, InitialBackoff: durationpb.New(100 * time.Millisecond), MaxBackoff: durationpb.New(time.Second)}},
			{Name: WaitStepNap, Sleep: durationpb.New(NapSleep), DependsOn: []string{WaitStepApprove}},
			{Name: WaitStepHook, Type: HookType, DependsOn: []string{WaitStepNap}, Timeout: durationpb.New(HookTimeout), RetryPolicy: retry, Escalation: comp},
		}}
}

// CallbackSuffix names the file, next to an agent's side-effect log, to
// which it passes the completion tokens of the steps it defers: the chaos
// suite's stand-in for the external system a real handler passes its
// token to (a webhook's URL). Readable by its owner only: tokens are
// secrets.
const CallbackSuffix = ".callbacks"

// Callback is one line of a callback file: the token that completes an
// execution the agent is about to defer.
type Callback struct {
	Task    string `json:"task"`
	Step    string `json:"step"`
	Attempt int32  `json:"attempt"`
	Token   string `json:"token"`
}

// AppendCallback writes c to the callback file with one write(2).
func (l *SideEffectLog) AppendCallback(c Callback) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.callbacks.Write(append(b, '\n'))
	return err
}

// registerHook registers the deferring handler: it logs its side effect
// (an execution started the external job), passes its completion token on
// (the callback file) and hands the step off with Defer; the load
// completes it later with that token, or one it read itself, or by name
// (possibly before the deferral is recorded: the scheduler then tells the
// agent to stop, and its deferral is refused).
func registerHook(a *agentsdk.Agent, log *SideEffectLog) {
	a.Handle(HookType, func(ctx context.Context, s *agentsdk.Step) (any, error) {
		if err := log.Append(SideEffect{Key: s.IdempotencyKey, Task: s.TaskID, Step: s.Name, Attempt: s.Attempt,
			Compensation: s.Compensation, Agent: a.ID(), At: time.Now().UnixNano()}); err != nil {
			return nil, err
		}
		if err := log.AppendCallback(Callback{Task: s.TaskID, Step: s.Name, Attempt: int32(s.Attempt), Token: s.CompletionToken()}); err != nil {
			return nil, err
		}
		return nil, s.Defer("chaos: waiting for the load's callback")
	})
}

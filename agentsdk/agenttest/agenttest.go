// Package agenttest runs agentsdk handlers in unit tests, without a
// scheduler: it builds the Step a handler gets, calls the handler as an
// agent does (panics recovered, output JSON-encoded, errors mapped to a step
// error) and reports what the agent would send and the heartbeats the
// handler sent.
//
//	res, err := agenttest.Run(ctx, agentsdk.Typed(charge), agenttest.Step{
//		Type:  "payments.charge",
//		Input: map[string]any{"order_id": "o-1"},
//	})
//	// res.Output, res.Error, res.Heartbeats
//
// What it does not do: nothing is retried or compensated (that is the
// scheduler's), heartbeats are counted, not coalesced or timed against a
// heartbeat_timeout, and the handler's ctx ends only at Step.Timeout or when
// the ctx given to Run ends (there is no CancelStep).
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/agentsdk/internal/bridge"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Step describes the execution a handler runs. Zero fields take the
// documented defaults.
type Step struct {
	// Namespace defaults to "default", TaskID to "task-1".
	Namespace, TaskID string
	// Name defaults to Type; Type to "step".
	Name, Type string
	// Attempt defaults to 1.
	Attempt int
	// IdempotencyKey defaults to "<TaskID>/<Name>".
	IdempotencyKey string
	// Compensation makes the execution an undo of the step.
	Compensation bool
	// Input is the task's input, Config the step's configuration, and
	// DependencyOutputs the outputs of the steps it depends on (for a
	// compensation: of the step being undone, under its own name); each is
	// converted through its JSON encoding, as a scheduler would send it.
	// Default none (JSON null).
	Input, Config     any
	DependencyOutputs map[string]any
	// Timeout is how long the execution may take: the handler's ctx ends
	// then and Step.CompleteBy is then; default one minute.
	Timeout time.Duration
	// CompletionToken is what Step.CompletionToken returns; default a fake
	// token ("rvt1.agenttest") for a forward step, so that Step.Defer
	// works, and none for a compensation (as a scheduler sends).
	CompletionToken string
}

// Result is what happened when the handler ran.
type Result struct {
	// Output is the step's output as the agent would send it, as JSON; nil
	// when the handler failed or returned nil.
	Output json.RawMessage
	// Error is the step error the agent would send (code, message,
	// non-retryable), nil on success. Returned is the handler's own error,
	// a panic as an *agentsdk.Error with code "panic".
	Error    *agentsdk.Error
	Returned error
	// Heartbeats counts the handler's Step.Heartbeat calls that succeeded
	// (an agent coalesces them to at most one message a second).
	Heartbeats int
	// Late is true when the handler returned at or after its complete-by:
	// an agent sends nothing then, and the scheduler counts the attempt as
	// timed out.
	Late bool
	// Deferred is true when the handler handed the step off (returned
	// Step.Defer's error), with DeferReason.
	Deferred    bool
	DeferReason string
}

// Decode decodes Output into v.
func (r *Result) Decode(v any) error {
	if r.Output == nil {
		return fmt.Errorf("agenttest: no output (error %v)", r.Error)
	}
	return json.Unmarshal(r.Output, v)
}

// Run runs h once on the execution s describes and returns what the agent
// would send. The handler's ctx is ctx's, ending at s.Timeout. It returns an
// error only when s cannot be built (a value that does not encode as JSON).
func Run(ctx context.Context, h agentsdk.HandlerFunc, s Step) (*Result, error) {
	as, err := assignment(s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(ctx, as.GetCompleteBy().AsTime())
	defer cancel()
	var beats atomic.Int64
	step := bridge.NewStep(as, func() { beats.Add(1) })
	res, herr := bridge.Execute(ctx, h, step)
	r := &Result{Returned: herr, Heartbeats: int(beats.Load()), Late: !time.Now().Before(as.GetCompleteBy().AsTime())}
	if e := res.GetError(); e != nil {
		r.Error = &agentsdk.Error{Code: e.GetCode(), Message: e.GetMessage(), NonRetryable: e.GetNonRetryable()}
	}
	if d := res.GetDeferred(); d != nil {
		r.Deferred, r.DeferReason = true, d.GetReason()
	}
	if res.GetOutput() != nil {
		if r.Output, err = protojson.Marshal(res.GetOutput()); err != nil {
			return nil, fmt.Errorf("agenttest: output: %w", err)
		}
	}
	return r, nil
}

func assignment(s Step) (*reevev1.StepAssignment, error) {
	s = withDefaults(s)
	input, err := value(s.Input, "input")
	if err != nil {
		return nil, err
	}
	config, err := value(s.Config, "config")
	if err != nil {
		return nil, err
	}
	deps := map[string]*structpb.Value{}
	for name, out := range s.DependencyOutputs {
		if deps[name], err = value(out, "dependency output "+name); err != nil {
			return nil, err
		}
	}
	as := &reevev1.StepAssignment{
		Ref:  &reevev1.StepRef{Namespace: s.Namespace, TaskId: s.TaskID, Step: s.Name, Attempt: int32(s.Attempt)},
		Type: s.Type, Input: input, Config: config, DependencyOutputs: deps,
		IdempotencyKey: s.IdempotencyKey, Compensation: s.Compensation,
		CompleteBy:      timestamppb.New(time.Now().Add(s.Timeout)),
		CompletionToken: s.CompletionToken,
	}
	return as, nil
}

func withDefaults(s Step) Step {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	if s.TaskID == "" {
		s.TaskID = "task-1"
	}
	if s.Type == "" {
		s.Type = "step"
	}
	if s.Name == "" {
		s.Name = s.Type
	}
	if s.Attempt == 0 {
		s.Attempt = 1
	}
	if s.IdempotencyKey == "" {
		s.IdempotencyKey = s.TaskID + "/" + s.Name
	}
	if s.Timeout <= 0 {
		s.Timeout = time.Minute
	}
	if s.CompletionToken == "" && !s.Compensation {
		s.CompletionToken = "rvt1.agenttest"
	}
	return s
}

// value converts v through its JSON encoding; nil stays nil (JSON null).
func value(v any, what string) (*structpb.Value, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("agenttest: %s: %w", what, err)
	}
	out := &structpb.Value{}
	if err := protojson.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("agenttest: %s: %w", what, err)
	}
	return out, nil
}

package agentsdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/agentsdk/internal/bridge"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Step is one execution of a step, as passed to a handler. Its fields are
// read-only.
type Step struct {
	Namespace string
	TaskID    string
	// Name is the step's name in the workflow, Type the step type handled.
	Name, Type string
	// Attempt is 1 for the first execution and grows with every retry (and
	// for the compensation).
	Attempt int
	// IdempotencyKey is the same for every attempt of the step (and differs
	// for its compensation): pass it to remote services so that a retry does
	// not repeat a side effect.
	IdempotencyKey string
	// CompleteBy is the deadline of this execution; the handler's ctx ends
	// then, and a result produced later is never sent.
	CompleteBy time.Time
	// Compensation is true when this execution undoes the step. The
	// output of a compensation is not kept (the scheduler records only
	// that the step was compensated).
	Compensation bool

	assignment *reevev1.StepAssignment
	agent      *Agent // nil outside an agent (agenttest, a Step built by hand)
	beat       func() // agenttest's heartbeat recorder
}

func newStep(as *reevev1.StepAssignment) *Step {
	ref := as.GetRef()
	return &Step{
		Namespace: ref.GetNamespace(), TaskID: ref.GetTaskId(), Name: ref.GetStep(), Type: as.GetType(),
		Attempt: int(ref.GetAttempt()), IdempotencyKey: as.GetIdempotencyKey(), CompleteBy: as.GetCompleteBy().AsTime(),
		Compensation: as.GetCompensation(), assignment: as,
	}
}

func init() {
	bridge.NewStep = func(as *reevev1.StepAssignment, beat func()) any {
		s := newStep(as)
		s.beat = beat
		return s
	}
	bridge.Execute = func(ctx context.Context, h, step any) (*reevev1.StepResult, error) {
		s := step.(*Step)
		out, err := invoke(ctx, h.(HandlerFunc), s)
		return result(s.assignment.GetRef(), out, err), err
	}
}

// Input decodes the task's input (JSON) into v.
func (s *Step) Input(v any) error { return decode(s.assignment.GetInput(), v, "input") }

// RawInput returns the task's input as JSON ("null" when there is none).
func (s *Step) RawInput() json.RawMessage {
	b, err := marshalValue(s.assignment.GetInput())
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// Config decodes the step's static configuration into v.
func (s *Step) Config(v any) error { return decode(s.assignment.GetConfig(), v, "config") }

// DependencyOutput decodes the output of a step this one depends on into v.
// For a compensation, the output of the step being undone is available
// under its own name.
func (s *Step) DependencyOutput(step string, v any) error {
	out, ok := s.assignment.GetDependencyOutputs()[step]
	if !ok {
		return fmt.Errorf("agentsdk: no output of step %q (depends on %v)", step, keys(s.assignment.GetDependencyOutputs()))
	}
	return decode(out, v, "output of "+step)
}

// Heartbeat tells the scheduler the step is still being worked on. Steps
// with a heartbeat_timeout must call it at least that often. Calls are
// coalesced to at most one message per second (per third of the heartbeat
// timeout, when that is shorter); it never blocks. It returns ctx's error
// once ctx ended. On a Step not made by an agent it only checks ctx (see
// agenttest for a Step that records heartbeats).
func (s *Step) Heartbeat(ctx context.Context) error {
	return s.heartbeat(ctx, nil)
}

// HeartbeatDetails is Heartbeat with progress details (any value encoded
// as JSON, at most 4 KiB), e.g. the last page processed. When this attempt
// fails or expires, the last details it sent reach the step's next attempt
// (PreviousHeartbeatDetails), so that it can resume. Only for steps with a
// heartbeat_timeout; best effort (docs/agent-protocol.md, Heartbeats).
// Details of coalesced calls are not lost: the latest go with the next
// heartbeat sent, or before the result of a failed attempt.
func (s *Step) HeartbeatDetails(ctx context.Context, details any) error {
	v, err := encodeOutput(details)
	if err != nil {
		return fmt.Errorf("agentsdk: heartbeat details: %w", err)
	}
	if n := proto.Size(v); n > maxDetails {
		return fmt.Errorf("agentsdk: heartbeat details: %d bytes encoded, more than the limit of %d", n, maxDetails)
	}
	return s.heartbeat(ctx, v)
}

func (s *Step) heartbeat(ctx context.Context, details *structpb.Value) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case s.agent != nil:
		s.agent.heartbeat(s.assignment.GetRef(), details)
	case s.beat != nil:
		s.beat()
	}
	return nil
}

// PreviousHeartbeatDetails decodes into v the last heartbeat details an
// earlier attempt of this step sent (see HeartbeatDetails). It reports
// false, leaving v alone, when there are none: a first attempt, or no
// earlier attempt sent any.
func (s *Step) PreviousHeartbeatDetails(v any) (bool, error) {
	d := s.assignment.GetHeartbeatDetails()
	if d == nil {
		return false, nil
	}
	return true, decode(d, v, "heartbeat details")
}

func decode(v *structpb.Value, out any, what string) error {
	b, err := marshalValue(v)
	if err != nil {
		return fmt.Errorf("agentsdk: %s: %w", what, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("agentsdk: decode %s: %w", what, err)
	}
	return nil
}

func marshalValue(v *structpb.Value) ([]byte, error) {
	if v == nil {
		return []byte("null"), nil
	}
	return protojson.Marshal(v)
}

// encodeOutput turns a handler's return value into a google.protobuf.Value
// through its JSON encoding.
func encodeOutput(out any) (*structpb.Value, error) {
	if out == nil {
		return nil, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("agentsdk: encode output: %w", err)
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("agentsdk: encode output: %w", err)
	}
	return v, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

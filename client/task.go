package client

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// IsTerminal reports whether a task in state s has ended: SUCCEEDED,
// FAILED, COMPENSATED or CANCELED. A terminal task never changes again,
// unless an operator retries a step of a FAILED one or compensates it.
func IsTerminal(s reevev1.TaskState) bool { return taskstate.TerminalTask(s) }

// TaskError is the error of a task that ended without succeeding: FAILED
// (a step failed and could not be retried or compensated; an operator is
// alerted), COMPENSATED (its succeeded steps were undone) or CANCELED.
type TaskError struct {
	// Task is the task as it ended.
	Task *reevev1.Task
	// State is the task's terminal state.
	State reevev1.TaskState
	// Reason is why the task ended, as the scheduler recorded it.
	Reason string
	// Step is the step whose failure ended the task, and StepError the
	// error it reported; "" and nil for a canceled task, or when no step
	// failed (an operator failed or compensated it).
	Step      string
	StepError *reevev1.StepError
}

func newTaskError(t *reevev1.Task) *TaskError {
	e := &TaskError{Task: t, State: t.GetState(), Reason: t.GetReason()}
	if e.State == reevev1.TaskState_TASK_STATE_CANCELED {
		return e
	}
	for _, s := range t.GetSteps() {
		if s.GetState() == reevev1.StepState_STEP_STATE_FAILED && !s.GetCompensation() {
			e.Step, e.StepError = s.GetName(), s.GetLastError()
			break
		}
	}
	return e
}

func (e *TaskError) Error() string {
	state := strings.TrimPrefix(e.State.String(), "TASK_STATE_")
	msg := fmt.Sprintf("task %s %s", e.Task.GetId(), state)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Outputs decodes the outputs of t's steps into out, as the JSON object
// {"<step name>": <output>, ...} of the steps that have an output (those
// that succeeded). See Run.Get.
func Outputs(t *reevev1.Task, out any) error {
	fields := map[string]*structpb.Value{}
	for _, s := range t.GetSteps() {
		if s.GetOutput() != nil {
			fields[s.GetName()] = s.GetOutput()
		}
	}
	return decode(structpb.NewStructValue(&structpb.Struct{Fields: fields}), out, "outputs of task "+t.GetId())
}

// StepOutput decodes the output of t's step named step into out; it fails
// when t has no such step or the step has no output (it did not succeed).
func StepOutput(t *reevev1.Task, step string, out any) error {
	for _, s := range t.GetSteps() {
		if s.GetName() != step {
			continue
		}
		if s.GetOutput() == nil {
			return fmt.Errorf("client: step %s of task %s has no output (state %s)", step, t.GetId(), s.GetState())
		}
		return decode(s.GetOutput(), out, "output of step "+step)
	}
	return fmt.Errorf("client: task %s has no step %s", t.GetId(), step)
}

// decode converts v to JSON and unmarshals it into out.
func decode(v *structpb.Value, out any, what string) error {
	b, err := protojson.Marshal(v)
	if err != nil {
		return fmt.Errorf("client: %s: %w", what, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: decode %s: %w", what, err)
	}
	return nil
}

package taskstate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Running a task again from a step (issue 37). A rerun is a new task
// (Task.rerun_of names the old one), not a reset in place: the old task's
// record and history stay what they were — also in the archive, which is
// read-only — and the new task is submitted, admitted and dispatched as any
// other. Of the old task's steps, those that SUCCEEDED (and were not undone
// since) keep their outputs in the new task, unless they are from or
// downstream of the step to run from; every other step runs again, in
// dependency order. So a rerun of a COMPENSATED task runs again what was
// undone: its steps are COMPENSATED, not SUCCEEDED.

// RerunAccepts lists the task states RerunTask accepts.
var RerunAccepts = []reevev1.TaskState{reevev1.TaskState_TASK_STATE_FAILED, reevev1.TaskState_TASK_STATE_COMPENSATED, reevev1.TaskState_TASK_STATE_SUCCEEDED}

// Rerun returns the new task, id newID, that runs old again from step from
// with input (nil: old's). It refuses (StateError) an old task in another
// state, and an unknown step.
func Rerun(old *reevev1.Task, newID, from string, input *structpb.Value, reason, actor string, now time.Time) (*reevev1.Task, error) {
	if err := needsTask(old, "rerun_task", RerunAccepts); err != nil {
		return nil, err
	}
	if FindStep(old, from) == nil {
		return nil, &refusal{ErrUnknownStep, fmt.Sprintf("task %s has no step %q", old.GetId(), from)}
	}
	if input == nil {
		input = old.GetInput()
	}
	wf := proto.Clone(old.GetWorkflow()).(*reevev1.Workflow)
	t := &reevev1.Task{
		Namespace:  old.GetNamespace(),
		Id:         newID,
		Workflow:   wf,
		State:      reevev1.TaskState_TASK_STATE_PENDING,
		Input:      input,
		CreateTime: timestamppb.New(now),
		UpdateTime: timestamppb.New(now),
		RerunOf:    old.GetId(),
		Labels:     old.GetLabels(),
		// The rerun is dispatched as the old task was.
		Priority:    old.GetPriority(),
		FairnessKey: old.GetFairnessKey(),
	}
	again := downstreamOf(wf, from)
	var kept []string
	for _, sp := range wf.GetSteps() {
		s := &reevev1.Step{
			Name:           sp.GetName(),
			Type:           sp.GetType(),
			State:          reevev1.StepState_STEP_STATE_PENDING,
			IdempotencyKey: IdempotencyKey(t.GetNamespace(), newID, sp.GetName()),
		}
		if was := FindStep(old, sp.GetName()); !again[sp.GetName()] && was.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED {
			// Done in the old task: its output stands (its idempotency key
			// is the old one's, as the work it names was done under it).
			s.State = reevev1.StepState_STEP_STATE_SUCCEEDED
			s.Output = was.GetOutput()
			s.StartTime, s.EndTime = was.GetStartTime(), was.GetEndTime()
			s.IdempotencyKey = was.GetIdempotencyKey()
			kept = append(kept, sp.GetName())
		}
		t.Steps = append(t.Steps, s)
	}
	msg := fmt.Sprintf("rerun of task %s (%s) from step %q", old.GetId(), StateName(old.GetState()), from)
	if len(kept) > 0 {
		msg += "; kept the outputs of " + strings.Join(kept, ", ")
	}
	if reason != "" {
		msg += ": " + reason
	}
	addHistory(t, now, "task.rerun", from, 0, actor, msg)
	rerunDeadline(t, old, now) // timers.go
	advance(t, now)
	return t, nil
}

// downstreamOf returns from and every step that depends on it, directly or
// through other steps.
func downstreamOf(wf *reevev1.Workflow, from string) map[string]bool {
	out := map[string]bool{from: true}
	for changed := true; changed; {
		changed = false
		for _, sp := range wf.GetSteps() {
			if out[sp.GetName()] {
				continue
			}
			if slices.ContainsFunc(sp.GetDependsOn(), func(d string) bool { return out[d] }) {
				out[sp.GetName()] = true
				changed = true
			}
		}
	}
	return out
}

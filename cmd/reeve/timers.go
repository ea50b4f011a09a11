package main

import (
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// timerFlags are task submit's flags for a later start and a deadline
// (issue 35).
type timerFlags struct {
	startIn     time.Duration
	startAt     string
	taskTimeout time.Duration
}

func (tf *timerFlags) add(f *pflag.FlagSet) {
	f.DurationVar(&tf.startIn, "start-in", 0, "start the task this long from now (e.g. 10m, 36h): nothing is dispatched before; at most 366 days")
	f.StringVar(&tf.startAt, "start-at", "", "start the task at this RFC 3339 time (e.g. 2026-12-24T18:00:00Z); a time in the past starts it now")
	f.DurationVar(&tf.taskTimeout, "task-timeout", 0, "the whole task must end within this long of its start (overrides the workflow's taskTimeout); past it the task is compensated or failed")
}

// apply sets the request's start time and task timeout from the flags, or
// returns a usage error naming the flag.
func (tf *timerFlags) apply(f *pflag.FlagSet, req *reevev1.SubmitTaskRequest, now time.Time) error {
	if f.Changed("start-in") && f.Changed("start-at") {
		return usagef("--start-in and --start-at exclude each other")
	}
	if f.Changed("start-in") {
		if tf.startIn < 0 {
			return usagef("--start-in: must not be negative, got %v", tf.startIn)
		}
		req.StartTime = timestamppb.New(now.Add(tf.startIn))
	}
	if err := parseTimeFlags(timeFlag{name: "--start-at", value: tf.startAt, dst: &req.StartTime}); err != nil {
		return err
	}
	if f.Changed("task-timeout") {
		if tf.taskTimeout <= 0 {
			return usagef("--task-timeout: must be positive, got %v", tf.taskTimeout)
		}
		req.TaskTimeout = durationpb.New(tf.taskTimeout)
	}
	return nil
}

// specType is what a workflow's step table shows as a step's type: "sleep
// 10m0s" for a sleep step.
func specType(s *reevev1.StepSpec) string {
	if d := s.GetSleep(); d != nil {
		return "sleep " + d.AsDuration().String()
	}
	return s.GetType()
}

// timerLines are the task's lines for a later start and a deadline, "" each
// when it has none.
func timerLines(t *reevev1.Task) (start, deadline string) {
	if st := t.GetStartTime(); st != nil {
		start = ts(st)
		if _, waiting := taskstate.AwaitingStart(t); waiting {
			start += " (waiting to start: nothing is dispatched before)"
		}
	}
	if d := t.GetDeadline(); d != nil {
		deadline = ts(d)
		if _, ok := taskstate.TaskDeadline(t); ok {
			deadline += " (then the task is compensated, or failed, whatever step it is in)"
		}
	}
	return start, deadline
}

// timerWaitingFor says what a step of a timer waits for: a sleep's end, or
// the task's start; "" for any other step.
func timerWaitingFor(t *reevev1.Task, s *reevev1.Step) string {
	if taskstate.Sleeping(t, s) {
		return "its sleep to end at " + ts(s.GetCompleteBy())
	}
	if at, ok := taskstate.AwaitingStart(t); ok && s.GetState() == reevev1.StepState_STEP_STATE_PENDING {
		return "the task's start at " + ts(timestamppb.New(at))
	}
	return ""
}

// listState is the task list's state column for a task waiting to start.
func listState(t *reevev1.Task, state string) string {
	if _, ok := taskstate.AwaitingStart(t); ok {
		return state + " (starts " + ts(t.GetStartTime()) + ")"
	}
	return state
}

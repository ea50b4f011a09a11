package supervisor

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// decide is the leader's decision for one expired key of the deadline
// index: a timer's (a sleep that ends, a task that starts, a task past its
// deadline: taskstate.DecideTimer), else the step's policy
// (taskstate.Decide). Timers ride the same path as every expiry: the same
// pages, batches of decisionsPerCall per RecoverSteps call, callsInFlight
// calls at once, and the same fence.
func decide(t *reevev1.Task, key string, st *reevev1.Step) (taskstate.Action, time.Duration) {
	if a, ok := taskstate.DecideTimer(t, key); ok {
		return a, 0
	}
	return taskstate.Decide(t, st)
}

// newTimerLateness is the histogram of how late the leader decides a
// timer (a sleep's end, a start, a task deadline) after its time.
func newTimerLateness(m metric.Meter) metric.Float64Histogram {
	h, _ := m.Float64Histogram("reeve.supervisor.timer.lateness", metric.WithUnit("s"),
		metric.WithDescription("How long after its time the leading supervisor decided a timer (a sleep step's end, a delayed start, a task deadline), by action (wake, start, task_timeout_compensate, task_timeout_fail)"))
	return h
}

// timerDecided records the lateness of a timer's decision (key names the
// step or the task-level mark); other decisions are not timers.
func (in *instruments) timerDecided(ctx context.Context, key string, a taskstate.Action, late time.Duration) {
	if a != taskstate.ActionWake && !taskstate.TaskMark(key) {
		return
	}
	action := a.String()
	if key == taskstate.DeadlineMark {
		action = "task_timeout_" + action
	}
	in.timerLate.Record(ctx, late.Seconds(), metric.WithAttributes(telemetry.KeyAction.String(action)))
}

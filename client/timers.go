package client

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// submitTimers are Submit's options for a later start and a deadline
// (issue 35).
type submitTimers struct {
	start   time.Time
	startIn time.Duration
	timeout time.Duration
}

// WithStartTime starts the task at t: until then it is PENDING with nothing
// dispatched (Task.start_time is set and in the future), and it can be
// canceled. At most 366 days ahead; a time not after now starts it at once.
// Its task timeout (WithTaskTimeout) counts from t.
func WithStartTime(t time.Time) SubmitOption {
	return func(o *submitOptions) { o.timers.start, o.timers.startIn = t, 0 }
}

// WithStartIn starts the task d after Submit is called (WithStartTime of
// now plus d, fixed once: a retried submission keeps the same start).
func WithStartIn(d time.Duration) SubmitOption {
	return func(o *submitOptions) { o.timers.startIn, o.timers.start = d, time.Time{} }
}

// WithTaskTimeout bounds the whole task: d after its start (or submission)
// the supervisor compensates it when a step of its workflow declares a
// compensation, else fails it, whatever step it is in. 1 s to 366 days;
// overrides the workflow's taskTimeout.
func WithTaskTimeout(d time.Duration) SubmitOption {
	return func(o *submitOptions) { o.timers.timeout = d }
}

func (tm submitTimers) apply(req *reevev1.SubmitTaskRequest, now time.Time) {
	switch {
	case !tm.start.IsZero():
		req.StartTime = timestamppb.New(tm.start)
	case tm.startIn > 0:
		req.StartTime = timestamppb.New(now.Add(tm.startIn))
	}
	if tm.timeout != 0 {
		req.TaskTimeout = durationpb.New(tm.timeout)
	}
}

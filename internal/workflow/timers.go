package workflow

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Durable timers (issue 35, items 3 and 4): sleep steps, delayed starts and
// a deadline for the whole task. docs/limits.md lists the bounds.
const (
	// MinSleep and MaxSleep bound StepSpec.sleep.
	MinSleep = time.Second
	MaxSleep = 366 * 24 * time.Hour
	// MinTaskTimeout and MaxTaskTimeout bound Workflow.task_timeout and
	// SubmitTaskRequest.task_timeout.
	MinTaskTimeout = time.Second
	MaxTaskTimeout = 366 * 24 * time.Hour
	// MaxStartDelay bounds how far ahead SubmitTaskRequest.start_time may
	// be (a start time in the past means now).
	MaxStartDelay = 366 * 24 * time.Hour
)

// IsSleep reports whether the step is a durable timer (StepSpec.sleep): it
// succeeds that long after it became ready, with no agent.
func IsSleep(s *reevev1.StepSpec) bool { return s.GetSleep() != nil }

// validateSleepStep checks a sleep step: its duration, and that it sets
// nothing that only an agent's step has. The rest of the step (name,
// dependencies) is checked as any step's.
func validateSleepStep(field string, s *reevev1.StepSpec) error {
	if err := validateDuration(field+".sleep", s.GetSleep(), MinSleep, MaxSleep); err != nil {
		return err
	}
	not := func(f string, set bool) error {
		if set {
			return fieldErr(field+"."+f, "a sleep step is run by no agent: it takes no %s (remove it, or remove sleep)", JSONName(f))
		}
		return nil
	}
	for _, c := range []struct {
		f   string
		set bool
	}{
		{"type", s.GetType() != ""},
		{"wait_for", s.GetWaitFor() != ""},
		{"config", s.GetConfig() != nil},
		{"timeout", s.GetTimeout() != nil},
		{"retry_policy", s.GetRetryPolicy() != nil},
		{"compensation", s.GetCompensation() != nil},
		{"heartbeat_timeout", s.GetHeartbeatTimeout() != nil},
		{"reassign_after_disconnect", s.GetReassignAfterDisconnect() != nil},
		{"schedule_to_start_timeout", s.GetScheduleToStartTimeout() != nil},
	} {
		if err := not(c.f, c.set); err != nil {
			return err
		}
	}
	return nil
}

// validateTaskTimeout checks a workflow's or a submission's task_timeout.
func validateTaskTimeout(field string, w *reevev1.Workflow) error {
	return validateDuration(field+".task_timeout", w.GetTaskTimeout(), MinTaskTimeout, MaxTaskTimeout)
}

// validateSubmitTimers checks the timer fields of a submission that need no
// clock (task_timeout); ValidateStartTime checks start_time.
func validateSubmitTimers(req *reevev1.SubmitTaskRequest) error {
	return validateDuration("task_timeout", req.GetTaskTimeout(), MinTaskTimeout, MaxTaskTimeout)
}

// ValidateStartTime checks SubmitTaskRequest.start_time against now: a
// valid timestamp at most MaxStartDelay ahead. It returns the time the task
// starts: the zero time when it starts at once (no start time, or one not
// after now).
func ValidateStartTime(field string, ts *timestamppb.Timestamp, now time.Time) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, fieldErr(field, "invalid timestamp: %v", err)
	}
	at := ts.AsTime()
	if at.After(now.Add(MaxStartDelay)) {
		return time.Time{}, fieldErr(field, "%s is more than %v ahead (at most %v)", at.UTC().Format(time.RFC3339), at.Sub(now).Round(time.Second), MaxStartDelay)
	}
	if !at.After(now) {
		return time.Time{}, nil
	}
	return at, nil
}

// TaskTimeout is how long a task may take: the submission's task_timeout,
// else the workflow's; 0 means no limit.
func TaskTimeout(w *reevev1.Workflow, req *reevev1.SubmitTaskRequest) time.Duration {
	if d := req.GetTaskTimeout(); d != nil {
		return d.AsDuration()
	}
	return w.GetTaskTimeout().AsDuration()
}

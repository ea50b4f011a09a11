package workflow

import (
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// EffectiveTimeout is the time one attempt of the step has: its own timeout,
// else the workflow's default, else DefaultTimeout.
func EffectiveTimeout(w *reevev1.Workflow, s *reevev1.StepSpec) time.Duration {
	switch {
	case s.GetTimeout() != nil:
		return s.GetTimeout().AsDuration()
	case w.GetDefaultTimeout() != nil:
		return w.GetDefaultTimeout().AsDuration()
	}
	return DefaultTimeout
}

// EffectiveScheduleToStart is how long a due attempt of the step may wait in
// the ready queue: its own schedule-to-start timeout, else the workflow's
// default; 0 means no limit.
func EffectiveScheduleToStart(w *reevev1.Workflow, s *reevev1.StepSpec) time.Duration {
	switch {
	case s.GetScheduleToStartTimeout() != nil:
		return s.GetScheduleToStartTimeout().AsDuration()
	case w.GetDefaultScheduleToStartTimeout() != nil:
		return w.GetDefaultScheduleToStartTimeout().AsDuration()
	}
	return 0
}

// CompensationScheduleToStart is EffectiveScheduleToStart for the step's
// compensation: its own, else the step's.
func CompensationScheduleToStart(w *reevev1.Workflow, s *reevev1.StepSpec) time.Duration {
	if d := s.GetCompensation().GetScheduleToStartTimeout(); d != nil {
		return d.AsDuration()
	}
	return EffectiveScheduleToStart(w, s)
}

// EffectiveRetryPolicy returns a new, fully defaulted copy of the step's
// retry policy (else the workflow's default). Inputs are not changed.
func EffectiveRetryPolicy(w *reevev1.Workflow, s *reevev1.StepSpec) *reevev1.RetryPolicy {
	p := s.GetRetryPolicy()
	if p == nil {
		p = w.GetDefaultRetryPolicy()
	}
	return withDefaults(p)
}

// CompensationTimeout is the time one attempt of the step's compensation has.
func CompensationTimeout(w *reevev1.Workflow, s *reevev1.StepSpec) time.Duration {
	if t := s.GetCompensation().GetTimeout(); t != nil {
		return t.AsDuration()
	}
	return EffectiveTimeout(w, s)
}

// CompensationRetryPolicy is the retry policy of the step's compensation:
// its own, else the step's.
func CompensationRetryPolicy(w *reevev1.Workflow, s *reevev1.StepSpec) *reevev1.RetryPolicy {
	if p := s.GetCompensation().GetRetryPolicy(); p != nil {
		return withDefaults(p)
	}
	return EffectiveRetryPolicy(w, s)
}

func withDefaults(p *reevev1.RetryPolicy) *reevev1.RetryPolicy {
	out := &reevev1.RetryPolicy{}
	if p != nil {
		out = proto.Clone(p).(*reevev1.RetryPolicy)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.InitialBackoff == nil {
		out.InitialBackoff = durationpb.New(DefaultInitialBackoff)
	}
	if out.MaxBackoff == nil {
		out.MaxBackoff = durationpb.New(max(DefaultMaxBackoff, out.InitialBackoff.AsDuration()))
	}
	if out.BackoffMultiplier == 0 {
		out.BackoffMultiplier = DefaultBackoffMultiplier
	}
	return out
}

// Backoff is the wait before the next attempt after `failures` failed
// attempts (failures >= 1): initial × multiplier^(failures−1), capped at the
// policy's max backoff. It is deterministic: no jitter.
func Backoff(p *reevev1.RetryPolicy, failures int) time.Duration {
	p = withDefaults(p)
	initial, ceiling := p.GetInitialBackoff().AsDuration(), p.GetMaxBackoff().AsDuration()
	if failures < 1 {
		failures = 1
	}
	d := float64(initial) * math.Pow(p.GetBackoffMultiplier(), float64(failures-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d >= float64(ceiling) {
		return ceiling
	}
	return time.Duration(d)
}

// Retryable reports whether a failed attempt may be retried under p: not if
// the agent marked the error non-retryable or its code is listed as such.
func Retryable(p *reevev1.RetryPolicy, e *reevev1.StepError) bool {
	if e.GetNonRetryable() {
		return false
	}
	return e.GetCode() == "" || !slices.Contains(p.GetNonRetryableErrorCodes(), e.GetCode())
}

// EffectiveEscalation is what step s of workflow w does when its attempts
// are exhausted or its agent reported a permanent error: its escalation if
// set; when unset, ESCALATION_COMPENSATE if any step of w declares a
// compensation (a saga undoes what it did when a step fails for good),
// else ESCALATION_FAIL. A step of a saga that must leave the task FAILED
// for an operator says ESCALATION_FAIL.
func EffectiveEscalation(w *reevev1.Workflow, s *reevev1.StepSpec) reevev1.Escalation {
	if e := s.GetEscalation(); e != reevev1.Escalation_ESCALATION_UNSPECIFIED {
		return e
	}
	if anyCompensation(w) {
		return reevev1.Escalation_ESCALATION_COMPENSATE
	}
	return reevev1.Escalation_ESCALATION_FAIL
}

// EscalationWait is how long ESCALATION_WAIT_THEN_RETRY waits.
func EscalationWait(s *reevev1.StepSpec) time.Duration {
	if d := s.GetEscalationWait(); d != nil {
		return d.AsDuration()
	}
	return DefaultEscalationWait
}

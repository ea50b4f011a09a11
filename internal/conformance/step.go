package conformance

import (
	"context"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
)

// StepType is the step type an agent under test registers and handles as
// StepConfig says.
const StepType = "reeve.conformance"

// Modes of the conformance step.
const (
	// ModeEcho reports the echo output (EchoOutput) at once.
	ModeEcho = "echo"
	// ModeSleep works for SleepMS, heartbeating when the assignment has a
	// heartbeat_timeout, then reports the echo output; it stops early, and
	// reports nothing, when canceled or at complete_by.
	ModeSleep = "sleep"
	// ModeFail reports StepConfig.Error as the step's error.
	ModeFail = "fail"
)

// StepConfig is the JSON config of a conformance step, set by the suite.
type StepConfig struct {
	// Mode is echo (the default when empty), sleep or fail.
	Mode string `json:"mode"`
	// SleepMS is how long a sleep step works, in milliseconds.
	SleepMS int `json:"sleep_ms,omitempty"`
	// Error is what a fail step reports.
	Error *StepError `json:"error,omitempty"`
	// Deps names the dependency outputs to copy into the echo output.
	Deps []string `json:"deps,omitempty"`
}

// StepError is the error a fail step reports, field for field as
// reeve.v1.StepError.
type StepError struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	NonRetryable bool   `json:"non_retryable"`
}

// EchoOutput is the output of a successful conformance step: what the agent
// received, so that the suite can check it was passed through unchanged.
type EchoOutput struct {
	// Input is the assignment's input (null when absent).
	Input any `json:"input"`
	// Attempt is ref.attempt of the assignment.
	Attempt int `json:"attempt"`
	// IdempotencyKey is the assignment's idempotency_key.
	IdempotencyKey string `json:"idempotency_key"`
	// Compensation is the assignment's compensation flag.
	Compensation bool `json:"compensation"`
	// Deps holds dependency_outputs[name] for every name in StepConfig.Deps.
	Deps map[string]any `json:"deps"`
}

// Handle registers the conformance step type on a Go SDK agent: the
// reference implementation of StepConfig.
func Handle(a *agentsdk.Agent) { a.Handle(StepType, handle) }

func handle(ctx context.Context, s *agentsdk.Step) (any, error) {
	var cfg StepConfig
	if err := s.Config(&cfg); err != nil {
		return nil, agentsdk.Permanent(err)
	}
	switch cfg.Mode {
	case "", ModeEcho:
	case ModeFail:
		e := cfg.Error
		if e == nil {
			e = &StepError{Message: "asked to fail"}
		}
		return nil, &agentsdk.Error{Code: e.Code, Message: e.Message, NonRetryable: e.NonRetryable}
	case ModeSleep:
		if err := work(ctx, s, time.Duration(cfg.SleepMS)*time.Millisecond); err != nil {
			return nil, err
		}
	default:
		return nil, &agentsdk.Error{Code: "bad_mode", Message: "unknown conformance mode " + cfg.Mode, NonRetryable: true}
	}
	out := EchoOutput{IdempotencyKey: s.IdempotencyKey, Attempt: s.Attempt, Compensation: s.Compensation, Deps: map[string]any{}}
	if err := s.Input(&out.Input); err != nil {
		return nil, agentsdk.Permanent(err)
	}
	for _, name := range cfg.Deps {
		var v any
		if err := s.DependencyOutput(name, &v); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		out.Deps[name] = v
	}
	return out, nil
}

// work waits d, or until ctx ends, calling Heartbeat every 50ms: the SDK
// coalesces the calls to what the step's heartbeat_timeout needs.
func work(ctx context.Context, s *agentsdk.Step, d time.Duration) error {
	done := time.NewTimer(d)
	defer done.Stop()
	beat := time.NewTicker(50 * time.Millisecond)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done.C:
			return nil
		case <-beat.C:
			_ = s.Heartbeat(ctx)
		}
	}
}

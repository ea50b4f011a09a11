// Package bridge lets agentsdk/agenttest reach the SDK's unexported
// execution path, so that a handler runs in tests exactly as in an agent.
// agentsdk sets the functions in its init; nothing else may.
package bridge

import (
	"context"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

var (
	// NewStep returns an *agentsdk.Step for as whose Heartbeat calls beat.
	NewStep func(as *reevev1.StepAssignment, beat func()) any
	// Execute runs h (an agentsdk.HandlerFunc) on step (an *agentsdk.Step)
	// as the agent does, panics recovered, and returns the result the
	// agent would send and the handler's error (a panic as an error).
	Execute func(ctx context.Context, h, step any) (*reevev1.StepResult, error)
)

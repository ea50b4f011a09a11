package scheduler

import (
	"context"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/version"
	"github.com/reeve-org/reeve/internal/workflow"
)

// The agent protocol this scheduler speaks (docs/agent-protocol.md,
// Evolution). Versions are additive: every agent is served, whatever
// version it registers with; optional features are named by capabilities.
const protocolVersion = reevev1.ProtocolVersion_PROTOCOL_VERSION_1

// Capabilities listed in Registered.capabilities.
const (
	// CapabilityHeartbeatDetails: Heartbeat.details reach the next
	// attempt's StepAssignment.heartbeat_details.
	CapabilityHeartbeatDetails = "heartbeat_details"
	// CapabilityRetryAfter: StepError.retry_after replaces the retry
	// policy's backoff.
	CapabilityRetryAfter = "retry_after"
	// CapabilityDefer: StepAssignment.completion_token is set for forward
	// steps and StepResult.deferred hands an execution off.
	CapabilityDefer = "defer"
)

// registered is the answer to a Register: the stream's session, what this
// scheduler speaks and the limits it enforces.
func (a *agents) registered(sessionID string) *reevev1.Registered {
	return &reevev1.Registered{
		SessionId:       sessionID,
		SchedulerId:     a.opts.id,
		ProtocolVersion: int32(protocolVersion),
		ServerVersion:   version.Get().Version,
		Capabilities:    []string{CapabilityHeartbeatDetails, CapabilityRetryAfter, CapabilityDefer},
		Limits: &reevev1.AgentLimits{
			MaxOutputBytes:           workflow.MaxOutputBytes,
			MaxErrorMessageBytes:     workflow.MaxErrorMessageBytes,
			AckTimeout:               durationpb.New(a.opts.ackTimeout),
			MaxHeartbeatDetailsBytes: workflow.MaxHeartbeatDetailsBytes,
			MaxRetryAfter:            durationpb.New(workflow.MaxRetryAfter),
		},
	}
}

// unknownMessage counts a ConnectRequest of a kind this scheduler does not
// know (reeve.agent.unknown_messages; reeve_agent_unknown_messages_total
// in Prometheus), which it ignored.
func (in *instruments) unknownMessage(ctx context.Context, ns string) {
	in.unknownMessages.Add(ctx, 1, metric.WithAttributes(telemetry.KeyNamespace.String(ns)))
}

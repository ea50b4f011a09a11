package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of Reeve's spans and metrics. They are part of Reeve's
// interface (dashboards and queries use them): never rename one.
const (
	KeyNamespace    = attribute.Key("reeve.namespace")
	KeyTaskID       = attribute.Key("reeve.task.id")
	KeyTaskState    = attribute.Key("reeve.task.state")
	KeyWorkflow     = attribute.Key("reeve.workflow.name")
	KeyStep         = attribute.Key("reeve.step.name")
	KeyStepType     = attribute.Key("reeve.step.type")
	KeyAttempt      = attribute.Key("reeve.step.attempt")
	KeyCompensation = attribute.Key("reeve.step.compensation")
	KeyOutcome      = attribute.Key("reeve.step.outcome")
	KeyErrorCode    = attribute.Key("reeve.step.error_code")
	KeyQueueWait    = attribute.Key("reeve.step.queue_wait_ms")
	KeyAgentID      = attribute.Key("reeve.agent.id")
	KeySchedulerID  = attribute.Key("reeve.scheduler.id")
	KeySupervisorID = attribute.Key("reeve.supervisor.id")
	KeyAction       = attribute.Key("reeve.supervisor.action")
	KeyDelay        = attribute.Key("reeve.retry.delay_ms")
	KeyOperation    = attribute.Key("reeve.etcd.operation")
)

// Span names.
const (
	SpanSubmit   = "reeve.task.submit"
	SpanAttempt  = "reeve.step.attempt"
	SpanExecute  = "reeve.step.execute"
	SpanResult   = "reeve.step.result"
	SpanDecision = "reeve.supervisor.decide"
	// SpanRecoveryApply is a scheduler applying one supervisor decision of
	// a RecoverSteps batch, a child of the decision's span.
	SpanRecoveryApply = "reeve.recovery.apply"
)

// ScopeName is the instrumentation scope of Reeve's tracers and meters.
const ScopeName = "github.com/reeve-org/reeve"

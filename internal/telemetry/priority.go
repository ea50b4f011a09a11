package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of priority and fairness (issue 36, item 3), on the
// attempt span of a dispatch. Part of Reeve's interface, as attrs.go's.
const (
	// KeyPriority is the priority the step was dispatched at, 1 to 5.
	KeyPriority = attribute.Key("reeve.task.priority")
	// KeyFairnessKey is the task's fairness key; absent for the shared key.
	KeyFairnessKey = attribute.Key("reeve.task.fairness_key")
)

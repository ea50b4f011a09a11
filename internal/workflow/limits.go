package workflow

import "time"

// Limits and defaults. docs/limits.md lists them for users.
const (
	// DefaultNamespace is used when a request leaves the namespace empty.
	DefaultNamespace = "default"
	// MaxNameLen bounds workflow names, step names, step types and error codes.
	MaxNameLen = 63
	// MaxNamespaceLen bounds namespace names.
	MaxNamespaceLen = 63
	// MaxTaskIDLen bounds task ids.
	MaxTaskIDLen = 128
	// MaxAgentIDLen bounds agent ids.
	MaxAgentIDLen = 128
	// MaxSteps bounds the steps of a workflow.
	MaxSteps = 100
	// MaxStepTypesPerAgent bounds the step types one agent registers.
	MaxStepTypesPerAgent = 100
	// MaxInputBytes bounds a task's input (encoded google.protobuf.Value).
	MaxInputBytes = 64 << 10
	// MaxOutputBytes bounds a step's output.
	MaxOutputBytes = 64 << 10
	// MaxConfigBytes bounds a step's or compensation's static config.
	MaxConfigBytes = 16 << 10
	// MaxWorkflowBytes bounds a whole encoded workflow definition.
	MaxWorkflowBytes = 256 << 10
	// MaxDescriptionBytes bounds a workflow description.
	MaxDescriptionBytes = 1024
	// MaxReasonBytes bounds a cancel reason.
	MaxReasonBytes = 1024
	// MaxLabels bounds a task's labels, and MaxLabelBytes a label's key
	// and its value.
	MaxLabels     = 16
	MaxLabelBytes = 63
	// MaxErrorMessageBytes bounds a step error's message.
	MaxErrorMessageBytes = 4096
	// MaxErrorDetailsBytes bounds a step error's details (encoded).
	MaxErrorDetailsBytes = 4096
	// MaxRetryAfter bounds a step error's retry_after.
	MaxRetryAfter = 24 * time.Hour
	// MaxHeartbeatDetailsBytes bounds one execution's heartbeat details
	// (encoded); larger ones are dropped.
	MaxHeartbeatDetailsBytes = 4096
	// MaxNonRetryableCodes bounds RetryPolicy.non_retryable_error_codes.
	MaxNonRetryableCodes = 20
	// MaxAttemptsLimit bounds RetryPolicy.max_attempts.
	MaxAttemptsLimit = 100
	// MaxConcurrentStepsLimit bounds Register.max_concurrent_steps.
	MaxConcurrentStepsLimit = 10000
	// MinTimeout and MaxTimeout bound step timeouts.
	MinTimeout = 100 * time.Millisecond
	MaxTimeout = 24 * time.Hour
	// DefaultTimeout is a step's timeout when neither it nor its workflow sets one.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxAttempts is RetryPolicy.max_attempts when 0.
	DefaultMaxAttempts = 3
	// DefaultInitialBackoff is RetryPolicy.initial_backoff when unset.
	DefaultInitialBackoff = time.Second
	// DefaultMaxBackoff is RetryPolicy.max_backoff when unset.
	DefaultMaxBackoff = 60 * time.Second
	// DefaultBackoffMultiplier is RetryPolicy.backoff_multiplier when 0.
	DefaultBackoffMultiplier = 2.0
	// DefaultEscalationWait is StepSpec.escalation_wait when unset.
	DefaultEscalationWait = 5 * time.Minute
	// MaxValueDepth bounds the nesting of a JSON value.
	MaxValueDepth = 32
)

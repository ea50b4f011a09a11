package scheduler

import "google.golang.org/grpc/codes"

// ErrorDomain is the google.rpc.ErrorInfo domain of every error the
// scheduler returns.
const ErrorDomain = "reeve.dev"

// The google.rpc.ErrorInfo reasons of the scheduler's errors: the stable
// contract clients match on (messages are for people and may change).
// docs/errors.md says when each is returned.
const (
	// INVALID_ARGUMENT, with a google.rpc.BadRequest naming the field.
	ReasonInvalidField = "INVALID_FIELD"
	// INVALID_ARGUMENT: the request did not decode (field "request").
	ReasonMalformedRequest = "MALFORMED_REQUEST"

	// NOT_FOUND.
	ReasonTaskNotFound     = "TASK_NOT_FOUND"
	ReasonWorkflowNotFound = "WORKFLOW_NOT_FOUND"
	ReasonAlertNotFound    = "ALERT_NOT_FOUND"

	// ALREADY_EXISTS: a task with that id exists with another request.
	ReasonTaskAlreadyExists = "TASK_ALREADY_EXISTS"

	// FAILED_PRECONDITION.
	ReasonFenced             = "FENCED"               // the supervisor fence is not the current leader's
	ReasonStaleAttempt       = "STALE_ATTEMPT"        // the named execution is not the step's current one
	ReasonTaskTerminal       = "TASK_TERMINAL"        // the task already ended
	ReasonStepNotFound       = "STEP_NOT_FOUND"       // the task has no step of that name
	ReasonStepNotQueued      = "STEP_NOT_QUEUED"      // the step is not waiting for an agent
	ReasonTaskPaused         = "TASK_PAUSED"          // the task is paused: its steps are not dispatched
	ReasonTooManyToCount     = "TOO_MANY_TO_COUNT"    // a count by labels would read more than 100,000 live tasks
	ReasonBatchNotFound      = "BATCH_NOT_FOUND"      // no batch job with that id in the namespace
	ReasonBatchAlreadyExists = "BATCH_ALREADY_EXISTS" // the batch_id names a job started by another request
	ReasonStepNotDue         = "STEP_NOT_DUE"         // the step is backing off
	ReasonNotExpired         = "NOT_EXPIRED"          // the named execution's deadline has not passed
	ReasonStepNotFailed      = "STEP_NOT_FAILED"      // retry_step on a step that is not FAILED
	ReasonWrongState         = "WRONG_STATE"          // the action does not apply to the task in its state
	ReasonTooManyOperations  = "TOO_MANY_OPERATIONS"  // one write needs more than etcd's --max-txn-ops
	// The record (task, workflow, alert) was written by a newer Reeve in a
	// version this one does not know; it was left as it is. A scheduler of
	// a Reeve that knows the version (ErrorInfo metadata record_version)
	// can do it.
	ReasonUnknownRecordVersion = "UNKNOWN_RECORD_VERSION"

	// ABORTED: a write kept losing to concurrent writers; retry.
	ReasonConflict = "CONFLICT"

	// RESOURCE_EXHAUSTED (with RetryInfo, but TOO_LARGE).
	ReasonOverloaded      = "OVERLOADED"        // past capacity: shedding new tasks (WithOverload), or the store's write queue is full
	ReasonNoSpace         = "NO_SPACE"          // etcd is out of (or near) its space quota
	ReasonTooLarge        = "TOO_LARGE"         // the record would pass etcd's request size; not retryable
	ReasonRateLimited     = "RATE_LIMITED"      // over the submission rate
	ReasonActiveTaskLimit = "ACTIVE_TASK_LIMIT" // the namespace has its most active tasks
	ReasonTooManyLists    = "TOO_MANY_LISTS"    // the scheduler serves its most lists at once
	ReasonSlowReader      = "SLOW_READER"       // a watch fell too far behind; watch again

	// UNAVAILABLE: etcd cannot be reached; retry.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// UNAVAILABLE: the archive of finished tasks cannot be reached; retry.
	ReasonArchiveUnavailable = "ARCHIVE_UNAVAILABLE"

	ReasonCanceled         = "CANCELED"
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
	ReasonInternal         = "INTERNAL"
)

// The google.rpc.ErrorInfo metadata keys, set where the error or the
// request names them.
const (
	MetaNamespace = "namespace"
	MetaTaskID    = "task_id"
	MetaStep      = "step"
	MetaAttempt   = "attempt"
	MetaWorkflow  = "workflow"
	MetaAlertID   = "alert_id"
	// UNKNOWN_RECORD_VERSION: the record's version, and the newest this
	// scheduler knows.
	MetaRecordVersion      = "record_version"
	MetaKnownRecordVersion = "known_record_version"
)

// ReasonOf is the reason of a status that no Reeve error made (an
// authorization refusal, a gRPC limit): its code's name, e.g.
// "PERMISSION_DENIED", "UNAUTHENTICATED".
func ReasonOf(c codes.Code) string {
	switch c {
	case codes.Canceled:
		return ReasonCanceled
	case codes.DeadlineExceeded:
		return ReasonDeadlineExceeded
	case codes.InvalidArgument:
		return ReasonInvalidField
	}
	return codeNames[c]
}

var codeNames = map[codes.Code]string{
	codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT", codes.NotFound: "NOT_FOUND",
	codes.AlreadyExists: "ALREADY_EXISTS", codes.PermissionDenied: "PERMISSION_DENIED",
	codes.ResourceExhausted: "RESOURCE_EXHAUSTED", codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

package scheduler

import (
	"context"
	"regexp"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/workflow"
)

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
	ReasonFenced            = "FENCED"              // the supervisor fence is not the current leader's
	ReasonStaleAttempt      = "STALE_ATTEMPT"       // the named execution is not the step's current one
	ReasonTaskTerminal      = "TASK_TERMINAL"       // the task already ended
	ReasonStepNotFound      = "STEP_NOT_FOUND"      // the task has no step of that name
	ReasonStepNotQueued     = "STEP_NOT_QUEUED"     // the step is not waiting for an agent
	ReasonStepNotDue        = "STEP_NOT_DUE"        // the step is backing off
	ReasonNotExpired        = "NOT_EXPIRED"         // the named execution's deadline has not passed
	ReasonStepNotFailed     = "STEP_NOT_FAILED"     // retry_step on a step that is not FAILED
	ReasonWrongState        = "WRONG_STATE"         // the action does not apply to the task in its state
	ReasonTooManyOperations = "TOO_MANY_OPERATIONS" // one write needs more than etcd's --max-txn-ops
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

// The getters of the requests that name a task, step or attempt.
type (
	namespaced interface{ GetNamespace() string }
	tasked     interface{ GetTaskId() string }
	stepped    interface{ GetStep() string }
	attempted  interface{ GetAttempt() int32 }
)

// fieldPrefix is the field path a message starts with ("page_size: ...").
var fieldPrefix = regexp.MustCompile(`^([a-z_][a-z0-9_]*(\[[0-9]+\])?(\.[a-z_][a-z0-9_]*(\[[0-9]+\])?)*): `)

// withRequest completes st with what req names: a reason when st has no
// ErrorInfo, the namespace, task, step and attempt as metadata, and, for an
// INVALID_ARGUMENT without one, a BadRequest naming the field its message
// starts with.
func withRequest(st *status.Status, req any) *status.Status {
	if st.Code() == codes.OK {
		return st
	}
	meta := map[string]string{}
	if r, ok := req.(namespaced); ok {
		meta[MetaNamespace] = workflow.Namespace(r.GetNamespace())
	}
	if r, ok := req.(tasked); ok && r.GetTaskId() != "" {
		meta[MetaTaskID] = r.GetTaskId()
	}
	if r, ok := req.(stepped); ok && r.GetStep() != "" {
		meta[MetaStep] = r.GetStep()
	}
	if r, ok := req.(attempted); ok && r.GetAttempt() != 0 {
		meta[MetaAttempt] = strconv.Itoa(int(r.GetAttempt()))
	}
	st = withErrorInfo(st, ReasonOf(st.Code()), meta)
	if st.Code() != codes.InvalidArgument {
		return st
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.BadRequest); ok {
			return st
		}
	}
	m := fieldPrefix.FindStringSubmatch(st.Message())
	if m == nil {
		return st
	}
	return withDetail(st, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: m[1], Description: st.Message()[len(m[0]):], Reason: ReasonInvalidField},
	}})
}

// errorUnary and errorStream complete every error status a call returns
// with withRequest: ServerOptions installs them outermost, so refusals of
// the interceptors after them (authorization) get a reason too.
func errorUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		err = withRequest(toStatus(err), req).Err()
	}
	return resp, err
}

func errorStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	fs := &firstMsgStream{ServerStream: ss}
	if err := h(srv, fs); err != nil {
		return withRequest(toStatus(err), fs.first).Err()
	}
	return nil
}

// firstMsgStream remembers the first message the handler received: a
// server-streaming call's request.
type firstMsgStream struct {
	grpc.ServerStream
	first any
}

func (s *firstMsgStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.first == nil {
		s.first = m
	}
	return err
}

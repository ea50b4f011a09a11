package scheduler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Retry delays sent with RESOURCE_EXHAUSTED and UNAVAILABLE refusals as a
// google.rpc.RetryInfo detail: how long a client should wait before trying
// the same request again.
const (
	retryAfter        = time.Second      // overload, rate and admission limits, etcd unreachable
	retryAfterNoSpace = 30 * time.Second // etcd out of space: an operator or compaction must act
)

// refusal is a request the scheduler refuses on its own account (a limit,
// a lost race with a slow reader): a gRPC code and a stable reason.
type refusal struct {
	code   codes.Code
	reason string
	msg    string
	retry  time.Duration // the RetryInfo delay; 0: the default for the code
}

func (e *refusal) Error() string { return e.msg }

// refuse returns a refusal with the message format and args make.
func refuse(code codes.Code, reason, format string, args ...any) error {
	return &refusal{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// toStatus maps every error the scheduler returns to a gRPC status; it is
// the only place that does. Nothing leaves as codes.Unknown. Every status
// carries a google.rpc.ErrorInfo (domain ErrorDomain, a Reason* reason and
// the metadata the error knows); INVALID_ARGUMENT carries a
// google.rpc.BadRequest naming the field; RESOURCE_EXHAUSTED and
// UNAVAILABLE carry a google.rpc.RetryInfo, except for a request too large
// to ever succeed. withRequest adds what the request names (namespace,
// task, step, attempt).
func toStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		st = withErrorInfo(st, ReasonOf(st.Code()), nil)
		if (st.Code() == codes.ResourceExhausted || st.Code() == codes.Unavailable) && !hasRetryInfo(st) {
			st = withDetail(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
		}
		return st
	}
	code, reason, msg := classify(err)
	st := status.New(code, msg)
	var ref *refusal
	meta := map[string]string{}
	var nf *store.NotFoundError
	if errors.As(err, &nf) {
		if nf.Namespace != "" {
			meta[MetaNamespace] = nf.Namespace
		}
		if k := notFoundKeys[nf.Kind]; k != "" && nf.Name != "" {
			meta[k] = nf.Name
		}
	}
	var uv *store.UnknownVersionError
	if errors.As(err, &uv) {
		if uv.Namespace != "" {
			meta[MetaNamespace] = uv.Namespace
		}
		if uv.Kind == store.KindTask && uv.Name != "" {
			meta[MetaTaskID] = uv.Name
		}
		meta[MetaRecordVersion] = strconv.FormatUint(uint64(uv.Version), 10)
		meta[MetaKnownRecordVersion] = strconv.Itoa(store.RecordVersion)
	}
	st = withErrorInfo(st, reason, meta)
	var fe *workflow.FieldError
	if errors.As(err, &fe) {
		st = withDetail(st, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Reason, Reason: reason},
		}})
	}
	switch {
	case code != codes.ResourceExhausted && code != codes.Unavailable, errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrTooManyToCount):
		return st
	case errors.Is(err, store.ErrNoSpace):
		return withDetail(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfterNoSpace)})
	case errors.As(err, &ref) && ref.retry > 0:
		return withDetail(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(ref.retry)})
	}
	return withDetail(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
}

// classify names an error's code, reason and message.
func classify(err error) (codes.Code, string, string) {
	var (
		fe  *workflow.FieldError
		ref *refusal
		se  *taskstate.StateError
	)
	switch {
	case err == nil:
		return codes.OK, "", ""
	case errors.As(err, &ref):
		return ref.code, ref.reason, ref.msg
	case errors.As(err, &fe):
		return codes.InvalidArgument, ReasonInvalidField, fe.Error()
	case errors.Is(err, store.ErrNotFound):
		var nf *store.NotFoundError
		reason := ReasonTaskNotFound
		if errors.As(err, &nf) {
			reason = notFoundReasons[nf.Kind]
		}
		return codes.NotFound, reason, err.Error()
	case errors.Is(err, store.ErrAlreadyExists):
		return codes.AlreadyExists, ReasonTaskAlreadyExists, err.Error()
	case errors.Is(err, store.ErrConflict):
		return codes.Aborted, ReasonConflict, err.Error()
	case errors.Is(err, store.ErrFenced):
		return codes.FailedPrecondition, ReasonFenced, err.Error()
	case errors.Is(err, taskstate.ErrStale):
		return codes.FailedPrecondition, ReasonStaleAttempt, err.Error()
	case errors.Is(err, taskstate.ErrTerminal):
		return codes.FailedPrecondition, ReasonTaskTerminal, err.Error()
	case errors.Is(err, taskstate.ErrUnknownStep):
		return codes.FailedPrecondition, ReasonStepNotFound, err.Error()
	case errors.Is(err, taskstate.ErrNotWaiting):
		return codes.FailedPrecondition, ReasonStepNotWaiting, err.Error()
	case errors.Is(err, taskstate.ErrCompletedOtherwise):
		return codes.FailedPrecondition, ReasonCompletedOtherwise, err.Error()
	case errors.Is(err, taskstate.ErrNotDeferrable):
		return codes.FailedPrecondition, ReasonStepNotDeferrable, err.Error()
	case errors.Is(err, taskstate.ErrNotQueued):
		return codes.FailedPrecondition, ReasonStepNotQueued, err.Error()
	case errors.Is(err, taskstate.ErrPaused):
		return codes.FailedPrecondition, ReasonTaskPaused, err.Error()
	case errors.Is(err, taskstate.ErrNotDue):
		return codes.FailedPrecondition, ReasonStepNotDue, err.Error()
	case errors.Is(err, taskstate.ErrNotExpired):
		return codes.FailedPrecondition, ReasonNotExpired, err.Error()
	case errors.Is(err, taskstate.ErrNotFailed):
		return codes.FailedPrecondition, ReasonStepNotFailed, err.Error()
	case errors.As(err, &se), errors.Is(err, taskstate.ErrWrongState):
		return codes.FailedPrecondition, ReasonWrongState, err.Error()
	case errors.Is(err, store.ErrUnknownVersion):
		// Not retryable here: a scheduler of a newer Reeve can.
		return codes.FailedPrecondition, ReasonUnknownRecordVersion, err.Error()
	case errors.Is(err, store.ErrNoSpace):
		return codes.ResourceExhausted, ReasonNoSpace, "etcd is out of space: new work is refused until an operator compacts and defragments it (" + err.Error() + ")"
	case errors.Is(err, store.ErrTooManyToCount):
		// Not retryable: the same count reads as many tasks again.
		return codes.ResourceExhausted, ReasonTooManyToCount, err.Error()
	case errors.Is(err, store.ErrTooManyOps):
		// Not retryable: the same write needs as many operations again.
		return codes.FailedPrecondition, ReasonTooManyOperations, err.Error()
	case errors.Is(err, store.ErrTooLarge):
		return codes.ResourceExhausted, ReasonTooLarge, err.Error()
	case errors.Is(err, store.ErrOverloaded):
		return codes.ResourceExhausted, ReasonOverloaded, "scheduler overloaded, new tasks are refused for now; retry with backoff (" + err.Error() + ")"
	case errors.Is(err, store.ErrUnavailable):
		return codes.Unavailable, ReasonStoreUnavailable, err.Error()
	case errors.As(err, new(*taskread.ArchiveError)):
		return codes.Unavailable, ReasonArchiveUnavailable, err.Error()
	case errors.Is(err, context.Canceled):
		return codes.Canceled, ReasonCanceled, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, ReasonDeadlineExceeded, err.Error()
	}
	return codes.Internal, ReasonInternal, err.Error()
}

var notFoundKeys = map[string]string{store.KindTask: MetaTaskID, store.KindWorkflow: MetaWorkflow, store.KindAlert: MetaAlertID}

var notFoundReasons = map[string]string{
	store.KindTask:     ReasonTaskNotFound,
	store.KindBatch:    ReasonBatchNotFound,
	store.KindWorkflow: ReasonWorkflowNotFound,
	store.KindAlert:    ReasonAlertNotFound,
}

// withErrorInfo returns st with an ErrorInfo of reason and meta, or, when st
// has one, with meta's keys it lacks added to it.
func withErrorInfo(st *status.Status, reason string, meta map[string]string) *status.Status {
	if st.Code() == codes.OK {
		return st
	}
	p := st.Proto()
	for i, d := range p.GetDetails() {
		info := &errdetails.ErrorInfo{}
		if d.MessageIs(info) && d.UnmarshalTo(info) == nil {
			if len(meta) == 0 {
				return st
			}
			if info.Metadata == nil {
				info.Metadata = map[string]string{}
			}
			for k, v := range meta {
				if _, ok := info.Metadata[k]; !ok {
					info.Metadata[k] = v
				}
			}
			if d.MarshalFrom(info) == nil {
				p.Details[i] = d
			}
			return status.FromProto(p)
		}
	}
	if len(meta) == 0 {
		meta = nil
	}
	return withDetail(st, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta})
}

func withDetail(st *status.Status, d protoadapt.MessageV1) *status.Status {
	if with, err := st.WithDetails(d); err == nil {
		return with
	}
	return st
}

func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

func statusErr(err error) error { return toStatus(err).Err() }

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

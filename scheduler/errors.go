package scheduler

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/internal/store"
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

// toStatus maps every error the scheduler returns to a gRPC status; it is
// the only place that does. Nothing leaves as codes.Unknown. A
// RESOURCE_EXHAUSTED or UNAVAILABLE status carries a google.rpc.RetryInfo
// detail, except for a request too large to ever succeed.
func toStatus(err error) *status.Status {
	st := mapStatus(err)
	switch {
	case st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable,
		errors.Is(err, store.ErrTooLarge), hasRetryInfo(st):
		return st
	case errors.Is(err, store.ErrNoSpace):
		return withRetryInfo(st, retryAfterNoSpace)
	}
	return withRetryInfo(st, retryAfter)
}

func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

func withRetryInfo(st *status.Status, d time.Duration) *status.Status {
	if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
		return with
	}
	return st
}

func mapStatus(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	var fe *workflow.FieldError
	switch {
	case errors.As(err, &fe):
		return status.New(codes.InvalidArgument, fe.Error())
	case errors.Is(err, store.ErrNotFound):
		return status.New(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrAlreadyExists):
		return status.New(codes.AlreadyExists, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.New(codes.Aborted, err.Error())
	case errors.Is(err, store.ErrFenced),
		errors.Is(err, taskstate.ErrStale), errors.Is(err, taskstate.ErrTerminal),
		errors.Is(err, taskstate.ErrNotQueued), errors.Is(err, taskstate.ErrUnknownStep),
		errors.Is(err, taskstate.ErrNotExpired), errors.Is(err, taskstate.ErrNotFailed),
		errors.Is(err, taskstate.ErrWrongState):
		return status.New(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrNoSpace):
		return status.New(codes.ResourceExhausted, "etcd is out of space: new work is refused until an operator compacts and defragments it ("+err.Error()+")")
	case errors.Is(err, store.ErrTooManyOps):
		// Not retryable: the same write needs as many operations again.
		return status.New(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrTooLarge):
		return status.New(codes.ResourceExhausted, err.Error())
	case errors.Is(err, store.ErrOverloaded):
		return status.New(codes.ResourceExhausted, "scheduler overloaded, new tasks are refused for now; retry with backoff ("+err.Error()+")")
	case errors.Is(err, store.ErrUnavailable):
		return status.New(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	}
	return status.New(codes.Internal, err.Error())
}

func statusErr(err error) error { return toStatus(err).Err() }

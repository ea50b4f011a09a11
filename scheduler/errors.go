package scheduler

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// toStatus maps every error the scheduler returns to a gRPC status; it is
// the only place that does. Nothing leaves as codes.Unknown.
func toStatus(err error) *status.Status {
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
		errors.Is(err, taskstate.ErrNotExpired), errors.Is(err, taskstate.ErrNotFailed):
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

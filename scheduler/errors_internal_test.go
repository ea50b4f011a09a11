package scheduler

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// The refusals no test sets up against a live server cheaply (etcd
// unreachable, out of space, a lost write race; a refusal of the
// authorization interceptor) map to their code, reason and retry advice
// like every other: one table over the mapping, wrapped as the store and
// the handlers wrap them.
func TestStatusOfEveryDomainError(t *testing.T) {
	req := &reevev1.RetryStepRequest{Namespace: "ns", TaskId: "t-1", Step: "a", Attempt: 2}
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason string
		retry  bool
	}{
		{store.ErrConflict, codes.Aborted, ReasonConflict, false},
		{store.ErrOverloaded, codes.ResourceExhausted, ReasonOverloaded, true},
		{store.ErrNoSpace, codes.ResourceExhausted, ReasonNoSpace, true},
		{store.ErrTooLarge, codes.ResourceExhausted, ReasonTooLarge, false},
		{store.ErrTooManyOps, codes.FailedPrecondition, ReasonTooManyOperations, false},
		{store.ErrUnavailable, codes.Unavailable, ReasonStoreUnavailable, true},
		{store.ErrFenced, codes.FailedPrecondition, ReasonFenced, false},
		{&store.UnknownVersionError{Kind: store.KindTask, Namespace: "ns", Name: "t-1", Version: 2}, codes.FailedPrecondition, ReasonUnknownRecordVersion, false},
		{taskstate.ErrNotQueued, codes.FailedPrecondition, ReasonStepNotQueued, false},
		{taskstate.ErrNotDue, codes.FailedPrecondition, ReasonStepNotDue, false},
		{context.Canceled, codes.Canceled, ReasonCanceled, false},
		{context.DeadlineExceeded, codes.DeadlineExceeded, ReasonDeadlineExceeded, false},
		{fmt.Errorf("something else"), codes.Internal, ReasonInternal, false},
		{refuse(codes.ResourceExhausted, ReasonTooManyLists, "page_size: busy"), codes.ResourceExhausted, ReasonTooManyLists, true},
		{status.Error(codes.PermissionDenied, "namespace: not yours"), codes.PermissionDenied, "PERMISSION_DENIED", false},
		{status.Error(codes.Unauthenticated, "no credentials"), codes.Unauthenticated, "UNAUTHENTICATED", false},
	} {
		st := withRequest(toStatus(fmt.Errorf("update task ns/t-1: %w", tc.err)), req)
		var info *errdetails.ErrorInfo
		retry := false
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = true
			}
		}
		if st.Code() != tc.code || info.GetReason() != tc.reason || info.GetDomain() != ErrorDomain || retry != tc.retry {
			t.Errorf("%v: %v %v, RetryInfo %v; want %v %s, RetryInfo %v", tc.err, st.Code(), info, retry, tc.code, tc.reason, tc.retry)
			continue
		}
		want := map[string]string{MetaNamespace: "ns", MetaTaskID: "t-1", MetaStep: "a", MetaAttempt: "2"}
		for k, v := range want {
			if info.GetMetadata()[k] != v {
				t.Errorf("%v: metadata %v, want %v", tc.err, info.GetMetadata(), want)
				break
			}
		}
	}
}

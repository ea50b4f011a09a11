package scheduler_test

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// errorInfo returns st's google.rpc.ErrorInfo, nil when it has none.
func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// reasonOf is st's ErrorInfo reason, "" when it has none.
func reasonOf(st *status.Status) string { return errorInfo(st).GetReason() }

// fieldOf is the field of st's one BadRequest violation, "" when it has not
// exactly one.
func fieldOf(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

// retryOf is st's RetryInfo delay, 0 when it has none.
func retryOf(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

package agentsdk

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// RetryDelay returns the delay a scheduler asked for in a
// google.rpc.RetryInfo detail of err's gRPC status (it sends one with
// RESOURCE_EXHAUSTED and UNAVAILABLE refusals), and whether there was one.
// Wait at least that long before sending the same request again.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

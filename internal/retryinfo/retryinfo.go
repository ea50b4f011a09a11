// Package retryinfo reads the google.rpc.RetryInfo detail a scheduler puts
// on its RESOURCE_EXHAUSTED and UNAVAILABLE refusals: how long to wait
// before sending the same request again. Every caller of the schedulers
// uses it: the agent SDK (agentsdk.RetryDelay), the client, and the dialing
// of the CLI and tools (internal/dial). It imports only gRPC.
//
//	if d, ok := retryinfo.Delay(err); ok {
//		// wait at least d before resending
//	}
package retryinfo

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Delay returns the delay a scheduler asked for in a google.rpc.RetryInfo
// detail of err's gRPC status, and whether there was one. Wait at least
// that long before sending the same request again.
func Delay(err error) (time.Duration, bool) {
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

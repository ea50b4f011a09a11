package agentsdk

import (
	"time"

	"github.com/reeve-org/reeve/internal/retryinfo"
)

// RetryDelay returns the delay a scheduler asked for in a
// google.rpc.RetryInfo detail of err's gRPC status (it sends one with
// RESOURCE_EXHAUSTED and UNAVAILABLE refusals), and whether there was one.
// Wait at least that long before sending the same request again. The
// client package and the CLI read the same detail the same way.
func RetryDelay(err error) (time.Duration, bool) { return retryinfo.Delay(err) }

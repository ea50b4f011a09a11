package dial

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/retryinfo"
)

// RetryRefusals returns an interceptor that sends a unary request again,
// after the delay the scheduler asked for in its google.rpc.RetryInfo
// detail, at most max times, when it was refused with RESOURCE_EXHAUSTED (a
// refusal changes nothing, so resending is safe) or, for a method that
// safe(method) says may be repeated, with UNAVAILABLE: a write that met
// UNAVAILABLE may have happened, so only reads and idempotent writes are
// repeated. A refusal without a RetryInfo detail is returned as it is, and
// no wait goes past the request's deadline: the refusal is returned instead.
func RetryRefusals(max int, safe func(method string) bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for i := 0; ; i++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			code := status.Code(err)
			if i >= max || (code != codes.ResourceExhausted && !(code == codes.Unavailable && safe(method))) {
				return err
			}
			d, ok := retryinfo.Delay(err)
			if !ok {
				return err
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return err
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
}

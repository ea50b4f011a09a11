package main

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
)

// maxRefusalRetries bounds how often one CLI request is sent again after a
// refusal that carries a retry delay.
const maxRefusalRetries = 3

// retryRefusals sends a request again, after the delay the scheduler asked
// for in its google.rpc.RetryInfo detail, when it was refused with
// RESOURCE_EXHAUSTED (a refusal changes nothing, so resending is safe), or
// with UNAVAILABLE for a read (Get*, List*): a write that met UNAVAILABLE may
// have happened, and is reported rather than repeated. It never waits past
// the request's deadline (--timeout).
func retryRefusals(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	name := method[strings.LastIndex(method, "/")+1:]
	read := strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List")
	for i := 0; ; i++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		code := status.Code(err)
		if i == maxRefusalRetries || (code != codes.ResourceExhausted && !(code == codes.Unavailable && read)) {
			return err
		}
		d, ok := agentsdk.RetryDelay(err)
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

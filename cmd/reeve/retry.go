package main

import (
	"strings"

	"github.com/reeve-org/reeve/internal/dial"
)

// maxRefusalRetries bounds how often one CLI request is sent again after a
// refusal that carries a retry delay.
const maxRefusalRetries = 3

// retryRefusals sends a request again, after the delay the scheduler asked
// for in its google.rpc.RetryInfo detail, when it was refused with
// RESOURCE_EXHAUSTED, or with UNAVAILABLE for a read (Get*, List*): a write
// that met UNAVAILABLE may have happened, and is reported rather than
// repeated. It never waits past the request's deadline (--timeout).
var retryRefusals = dial.RetryRefusals(maxRefusalRetries, isRead)

// isRead reports whether a full gRPC method name is a read (Get*, List*).
func isRead(method string) bool {
	name := method[strings.LastIndex(method, "/")+1:]
	return strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List")
}

// Package client is the Go client of Reeve: submit tasks, wait for them,
// read their outputs, follow their states, cancel them, and take an
// operator's actions on them.
//
//	c, err := client.Dial("127.0.0.1:7430")
//	if err != nil { ... }
//	defer c.Close()
//	run, err := c.Submit(ctx, "trip", map[string]any{"traveler": "ada"},
//		client.WithTaskID("trip-ada-1")) // the same id again: the same task
//	if err != nil { ... }
//	var out struct {
//		BookFlight struct{ Booking string } `json:"book_flight"`
//	}
//	err = run.Get(ctx, &out) // waits; *client.TaskError if it did not succeed
//
// A task's output is the object of its steps' outputs keyed by step name;
// Get decodes it into a struct through JSON, StepOutput one step's. Wait
// returns the task itself, Watch every state it goes through.
//
// Dial takes one scheduler's address or several, comma-separated; options
// add TLS (WithTLSFiles, mutual TLS with a client certificate) and a bearer
// token (WithToken). Calls the scheduler refuses for load
// (RESOURCE_EXHAUSTED, or UNAVAILABLE for calls that may be repeated) are
// sent again after the delay it asks for in its google.rpc.RetryInfo
// detail (WithRefusalRetries). Errors from the scheduler keep their gRPC
// status: status.Code(err) tells NOT_FOUND, ALREADY_EXISTS (a task id
// submitted again with another workflow or input), PERMISSION_DENIED...
//
// Workflows are registered with `reeve workflow register -f FILE` (or
// SchedulerService().RegisterWorkflow); agents that run the steps are
// written with package agentsdk. docs/client.md has the whole story.
package client

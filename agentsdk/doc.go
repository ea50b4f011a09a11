// Package agentsdk is the Go SDK for Reeve agents: processes that run the
// steps of tasks for a scheduler.
//
//	type Order struct{ OrderID string `json:"order_id"` }
//	type Charge struct{ ChargeID string `json:"charge_id"` }
//
//	agent, err := agentsdk.New([]string{"127.0.0.1:7430"})
//	if err != nil { ... }
//	agent.Handle("payments.charge", agentsdk.Typed(func(ctx context.Context, s *agentsdk.Step, o Order) (Charge, error) {
//		id, err := charge(ctx, o.OrderID, s.IdempotencyKey)
//		return Charge{ChargeID: id}, err
//	}))
//	err = agent.Run(ctx) // until ctx ends, then drains
//
// Typed decodes the task's input into the handler's In and encodes its Out
// as the step's output; a plain HandlerFunc, func(ctx, *Step) (any, error),
// reads the input, the step's config and its dependencies' outputs through
// Step. Return an *Error to give a failure a code (matched against the
// workflow's non_retryable_error_codes), Permanent to fail for good. A
// compensation's output is not kept by the scheduler (the step becomes
// COMPENSATED); only its success or failure counts. Every failure the agent
// reports is logged at WARN ("step failed", with its code, the step type,
// task, step, attempt and message), a panic and an undecodable typed input
// included (codes "panic" and "bad_input").
//
// The deadline rule of the Scheduler Agent Supervisor pattern is enforced
// for you: a handler's ctx ends at the step's complete-by, and a result
// produced after it is never sent — not even an error — because the
// scheduler already counts the attempt as failed and may have given the
// step to another agent. Make remote calls idempotent with
// Step.IdempotencyKey, which is the same for every attempt of a step.
// Likewise, a step that sets reassign_after_disconnect has its handler's ctx
// canceled once the agent has been without a scheduler stream that long (no
// result is sent: the step has been given to another agent). A handler's ctx
// carries the values of the ctx given to Run, not its cancellation: ending
// Run's ctx starts a graceful shutdown that lets running steps finish.
//
// The agent connects to one scheduler at a time over one gRPC stream (New
// dials the addresses; NewWithConn uses a *grpc.ClientConn you made),
// reconnects with jittered backoff across its addresses, re-sends results
// whose acknowledgement was lost, and on shutdown finishes running steps
// before it returns. It never drops an assignment ack or a heartbeat; when
// the stream is slow, results wait in a bounded queue (WithResultQueue) and
// the handler's goroutine waits for room. Retry (configured by
// RetrySettings) and Breaker are the pattern's agent-side helpers for
// transient and longer-lasting faults of a remote service.
//
// Package agenttest runs handlers in unit tests without a scheduler.
//
// The wire protocol is documented in docs/agent-protocol.md.
package agentsdk

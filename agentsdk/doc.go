// Package agentsdk is the Go SDK for Reeve agents: processes that run the
// steps of tasks for a scheduler.
//
//	agent, err := agentsdk.New([]string{"127.0.0.1:7430"})
//	if err != nil { ... }
//	agent.Handle("payments.charge", func(ctx context.Context, s *agentsdk.Step) (any, error) {
//		var order struct{ OrderID string `json:"order_id"` }
//		if err := s.Input(&order); err != nil {
//			return nil, agentsdk.Permanent(err) // retrying cannot fix bad input
//		}
//		id, err := charge(ctx, order.OrderID, s.IdempotencyKey)
//		return map[string]string{"charge_id": id}, err
//	})
//	err = agent.Run(ctx) // until ctx ends, then drains
//
// The deadline rule of the Scheduler Agent Supervisor pattern is enforced
// for you: a handler's ctx ends at the step's complete-by, and a result
// produced after it is never sent — not even an error — because the
// scheduler already counts the attempt as failed and may have given the
// step to another agent. Make remote calls idempotent with
// Step.IdempotencyKey, which is the same for every attempt of a step.
// Likewise, a step that sets reassign_after_disconnect has its handler's ctx
// canceled once the agent has been without a scheduler stream that long (no
// result is sent: the step has been given to another agent).
//
// The agent connects to one scheduler at a time over one gRPC stream,
// reconnects with jittered backoff across its addresses, re-sends results
// whose acknowledgement was lost, and on shutdown finishes running steps
// before it returns. Retry and Breaker are the pattern's agent-side helpers
// for transient and longer-lasting faults of a remote service.
//
// The wire protocol is documented in docs/agent-protocol.md.
package agentsdk

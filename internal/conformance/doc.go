// Package conformance checks that an agent implementation, in any language,
// speaks the agent protocol of docs/agent-protocol.md correctly.
//
// The suite plays the scheduler: it serves reeve.v1.AgentService on a
// loopback address, the agent under test connects to it, and the suite
// drives it through scripted cases (assignment and result, error result,
// deadline passed, cancel, stale attempt, refused result, result redelivery
// after a broken stream, drain and reconnect, a message kind from a newer
// scheduler, heartbeats, graceful shutdown),
// reporting pass or fail per case. The agent must serve the step type
// StepType, whose behaviour the suite controls through the step's config
// (see StepConfig). No etcd is involved: the suite checks the agent, not the
// scheduler.
//
//	s, err := conformance.Listen(conformance.Config{})
//	proc, err := conformance.StartCommand([]string{"node", "dist/agent.js"}, s.Addr(), os.Stderr)
//	report := s.Run(ctx, proc)
//	s.Close()
//
// The suite compares times taken on its own clock with the assignment's
// complete_by: run it and the agent on the same machine.
package conformance

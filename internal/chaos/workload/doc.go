// Package workload is the chaos suite's workload: the chaos workflows
// (chaos.saga, chaos.saga-fail, chaos.wide), the agent handlers that serve
// them (`reeve agent --chaos`) and the side-effect log those handlers
// append to. It imports only the SDK and the API, so that the chaos suite
// (internal/chaos), which checks the log, and the failover measurement
// (internal/cluster/failover), which runs the same workflows, both build on
// it without importing each other.
//
//	log, err := workload.OpenSideEffectLog(path)
//	// register workload.Workflows() with the schedulers, then
//	workload.Register(agent, log)
package workload

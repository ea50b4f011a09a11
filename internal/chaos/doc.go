// Package chaos is Reeve's chaos suite: a bounded load of saga tasks on a
// real local cluster (internal/cluster: separate etcd, scheduler, supervisor
// and agent processes, with toxiproxy on the agent→scheduler and
// component→etcd links) while a seeded fault injector kills and restarts
// processes and injects network faults; after the load drains, a checker
// reads etcd and the agents' side-effect logs and reports every violated
// invariant. `reeve chaos` runs it; docs/reliability.md describes the
// invariants and a real run.
//
//	rep, err := chaos.Run(ctx, chaos.Config{Seed: 42, Tasks: 2000, Dir: dir,
//		Reeve: "bin/reeve", Etcd: ".tools/bin/etcd", Toxiproxy: ".tools/bin/toxiproxy-server"})
//	// err: the run could not be carried out; rep.Violations: invariants broken.
//
// The seed fixes the fault schedule (which fault, on what, when, for how
// long) and each task's designed behaviour. It does not fix the operating
// system's timing, so a replay injects the same faults into a run that
// interleaves differently.
package chaos

// Package cluster starts a Reeve cluster on one machine as separate OS
// processes on loopback: an etcd cluster (the official etcd binary), several
// `reeve scheduler`, `reeve supervisor` and `reeve agent` processes, and,
// optionally, a toxiproxy server whose listeners sit between agents and
// schedulers and between components and etcd. Every process can be killed
// and started again with the same command line, which is what the chaos
// suite (internal/chaos) does. `reeve cluster` runs it from the command line.
//
//	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Reeve: "bin/reeve", Etcd: ".tools/bin/etcd",
//		AgentArgs: func(int) []string { return []string{"--demo"} }})
//	if err != nil { ... }
//	defer c.Stop(10 * time.Second)
//	_ = c.Schedulers[0].Kill() // its agents move to the other scheduler
//
// Ports are picked free on 127.0.0.1 when the cluster starts and kept
// across restarts. Logs are appended to <Dir>/logs/<name>.log.
//
// With Config.Secure the cluster runs as production does: mutual TLS with
// role checks between every pair of processes, etcd's peers included, with
// a certificate per role (Identity) in <Dir>/certs. Clients of a secure
// cluster dial with DialOptions(Admin) or ClientTLS, read etcd with Client,
// and RefusedCalls lists the calls the role checks refused.
package cluster

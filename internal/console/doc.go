// Package console is Reeve's web console: server-rendered pages of tasks,
// alerts, workflows, schedules, agents, queues and the steps waiting for a
// person, with operator actions and approvals, served by
// `reeve dev`, `reeve scheduler --console-listen` and `reeve console`.
//
// The console is a client of the gRPC API only (it never reads etcd): each
// browser session's calls carry its own bearer token in secure mode, so the
// scheduler's roles apply. Live pages are Server-Sent-Events streams fed by
// WatchTask, WatchTasks and WatchAlerts. See docs/console.md.
//
//	cc, _ := grpc.NewClient("127.0.0.1:7430", grpc.WithTransportCredentials(insecure.NewCredentials()))
//	c, err := console.New(cc, console.WithReadOnly(false))
//	if err != nil { ... }
//	lis, _ := net.Listen("tcp", "127.0.0.1:8233")
//	err = c.Serve(ctx, lis) // until ctx ends
//
// A Server is safe for concurrent use. Sessions live in the process: a
// restart signs every browser out.
package console

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/etcdserver"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// serverCommands are the commands that run Reeve's processes.
func serverCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{newDevCmd(g), newSchedulerCmd(g), newSupervisorCmd(g), newAgentCmd(g), newClusterCmd(), newChaosCmd()}
}

// logFlags are the logging flags every server command has.
type logFlags struct{ format, level string }

func (f *logFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.format, "log-format", "text", "log format: text or json")
	cmd.Flags().StringVar(&f.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (f *logFlags) logger(cmd *cobra.Command) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	// Records logged with a span's context carry trace_id and span_id.
	switch f.format {
	case "text":
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(cmd.ErrOrStderr(), opts))), nil
	case "json":
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(cmd.ErrOrStderr(), opts))), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", f.format)
}

func newDevCmd(g *globals) *cobra.Command {
	var (
		dataDir, listen, etcdListen string
		withDemo, secure            bool
		tick                        time.Duration
		logs                        logFlags
		tel                         telemetryFlags
		prof                        pprofFlag
		srvSec                      serverSecurity
		lim                         limitFlags
		deg                         degradedFlags
		gcf                         perfFlags
		con                         consoleFlags
		arc                         archiveFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Reeve in one process: embedded etcd, a scheduler and (with --demo) demo agents",
		Long: `dev runs everything in one process for trying Reeve out and for development:
an embedded single-member etcd (data under --data-dir), a scheduler on --listen,
and with --demo the demo workflows (demo.orders, demo.timeout, demo.compensate)
and agents that serve them. Stop it with Ctrl-C; state survives restarts.

With --secure it creates a local CA and certificates under <data-dir>/certs
(once), serves mutual TLS with role checks, secures the embedded etcd's client
port with client certificates, and prints the environment a client needs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd)
			if err != nil {
				return usageError{err}
			}
			if err := lim.check(); err != nil {
				return err
			}
			memLimit, gcPercent, err := gcf.apply(cmd)
			if err != nil {
				return err
			}
			log.Debug("go runtime", "memory_limit_bytes", memLimit, "gc_percent", gcPercent)
			flush, err := tel.start(cmd.Context(), log, "reeve-dev")
			if err != nil {
				return err
			}
			defer flush()
			degOpts, err := deg.options()
			if err != nil {
				return err
			}
			dev, err := devSecurity(cmd, g, &srvSec, dataDir, secure)
			if err != nil {
				return err
			}
			gopts, reload, err := srvSec.serverOptions(&g.sec, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reloadOnHangup(ctx, log, reload)
			_, stopProf, err := prof.start(ctx, log)
			if err != nil {
				return err
			}
			defer stopProf()

			startCtx, cancel := context.WithTimeout(ctx, time.Minute)
			etcdLog := zap.NewNop() // its shutdown chatter reads like failures
			if logs.level == "debug" {
				etcdLog = nil
			}
			etcd, err := etcdserver.Start(startCtx, etcdserver.Config{DataDir: filepath.Join(dataDir, "etcd"), ClientAddr: etcdListen, Logger: etcdLog, ClientTLS: dev.etcdTLS, MaxTxnOps: deg.maxTxnOps})
			cancel()
			if err != nil {
				return err
			}
			defer etcd.Close()
			cli := etcd.Client()
			if arc.dsn == "" {
				arc.dsn = devArchiveDSN(dataDir)
			}
			arcOpts, closeArchive, err := arc.open(ctx, log)
			if err != nil {
				return err
			}
			defer closeArchive()

			// serve ends the started callback's context before it returns;
			// the supervisor has stopped when waitSupervisor returns.
			waitSupervisor := func() {}
			defer func() { waitSupervisor() }()
			return serve(ctx, log, cli, listen, "", gopts, func(ctx context.Context, srv *scheduler.Server, addr string) error {
				fmt.Fprintf(cmd.OutOrStdout(), "reeve dev: scheduler and supervisor on %s (%s), etcd on %s, data in %s\n", addr, describe(gopts), strings.Join(etcd.Endpoints(), ","), dataDir)
				if secure {
					dev.printEnv(cmd.OutOrStdout(), addr)
				}
				wait, err := startSupervisor(ctx, log, cli, []string{addr}, dev.supervisor, supervisor.WithTick(tick))
				if err != nil {
					return err
				}
				waitSupervisor = wait
				if err := dev.startConsole(ctx, log, cmd.OutOrStdout(), &con, addr); err != nil {
					return err
				}
				if !withDemo {
					return nil
				}
				return startDemo(ctx, log, srv, addr, dev.agentOpts...)
			}, append(append(append(append([]scheduler.Option{scheduler.WithLogger(log), scheduler.WithEmbeddedDefragmenter(etcd.Defragment)}, lim.options()...), degOpts...), gcf.schedulerOptions()...), arcOpts...)...)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./.reeve", "directory for the embedded etcd's data")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7430", "address the scheduler's gRPC API listens on")
	cmd.Flags().StringVar(&etcdListen, "etcd-listen", "127.0.0.1:0", "address of the embedded etcd's client API (for etcdctl); port 0 picks a free one")
	cmd.Flags().BoolVar(&withDemo, "demo", false, "register the demo workflows and run demo agents")
	cmd.Flags().DurationVar(&tick, "supervisor-tick", time.Second, "the supervisor's safety-net pass over the deadline index (it wakes at the earliest deadline anyway)")
	cmd.Flags().BoolVar(&secure, "secure", false, "mutual TLS with role checks, certificates from <data-dir>/certs (created when missing); etcd's client port needs client certificates")
	srvSec.register(cmd, g.getenv)
	lim.register(cmd)
	deg.register(cmd)
	logs.register(cmd)
	tel.register(cmd)
	prof.register(cmd)
	gcf.register(cmd, g.getenv, 400, true)
	con.register(cmd, "127.0.0.1:8233")
	arc.registerServer(cmd, g.getenv, "")
	cmd.Flags().Lookup("archive-dsn").Usage += " (default sqlite:<data-dir>/archive.db)"
	return cmd
}

// startSupervisor runs a supervisor acting through the schedulers at addrs,
// each dialed on its own with sched's TLS and token, until ctx ends; wait
// returns once it has stopped and closed its connections (after ctx ended).
func startSupervisor(ctx context.Context, log *slog.Logger, cli *clientv3.Client, addrs []string, sched dial.Config, opts ...supervisor.Option) (wait func(), err error) {
	var clients []reevev1.SupervisorServiceClient
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}
	for _, a := range addrs {
		sched.Address = a
		cc, err := dial.Schedulers(sched, telemetry.ClientHandler())
		if err != nil {
			closeAll()
			return nil, dialUsage(err, "--schedulers")
		}
		conns = append(conns, cc)
		clients = append(clients, reevev1.NewSupervisorServiceClient(cc))
	}
	sup, err := supervisor.New(cli, clients, append([]supervisor.Option{supervisor.WithLogger(log.With("component", "supervisor"))}, opts...)...)
	if err != nil {
		closeAll()
		return nil, err
	}
	// A layout newer than this Reeve knows ends the process.
	if err := sup.CheckLayout(ctx); err != nil {
		closeAll()
		if ctx.Err() != nil {
			return func() {}, nil
		}
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sup.Run(ctx)
		closeAll()
	}()
	return func() { <-done }, nil
}

// startDemo registers the demo workflows and runs demo agents against the
// scheduler until ctx ends.
func startDemo(ctx context.Context, log *slog.Logger, srv *scheduler.Server, addr string, opts ...agentsdk.Option) error {
	for _, w := range demo.Workflows() {
		if _, err := srv.SchedulerService().RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
			return fmt.Errorf("register demo workflow %s: %w", w.GetName(), err)
		}
	}
	agent, err := agentsdk.New([]string{addr}, append([]agentsdk.Option{agentsdk.WithAgentID("demo-agent"), agentsdk.WithLogger(log.With("component", "demo-agent"))}, opts...)...)
	if err != nil {
		return err
	}
	demo.Register(agent)
	go func() {
		if err := agent.Run(ctx); err != nil {
			log.Error("demo agent stopped", "err", err)
		}
	}()
	return nil
}

func newSchedulerCmd(g *globals) *cobra.Command {
	var (
		endpoints          []string
		listen, id, prefix string
		retention          time.Duration
		logs               logFlags
		tel                telemetryFlags
		prof               pprofFlag
		srvSec             serverSecurity
		etcdSec            etcdSecurity
		lim                limitFlags
		deg                degradedFlags
		hf                 healthFlag
		gcf                perfFlags
		con                consoleFlags
		arc                archiveFlags
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run a scheduler against an external etcd cluster",
		Long: `scheduler serves the client API (reeve.v1.SchedulerService) and the agent
API (reeve.v1.AgentService) on --listen, with state in the etcd cluster at
--etcd-endpoints. Run as many as you like against one etcd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd)
			if err != nil {
				return usageError{err}
			}
			if err := lim.check(); err != nil {
				return err
			}
			memLimit, gcPercent, err := gcf.apply(cmd)
			if err != nil {
				return err
			}
			log.Debug("go runtime", "memory_limit_bytes", memLimit, "gc_percent", gcPercent)
			flush, err := tel.start(cmd.Context(), log, "reeve-scheduler")
			if err != nil {
				return err
			}
			defer flush()
			if len(endpoints) == 0 {
				return usagef("--etcd-endpoints: required (or REEVE_ETCD_ENDPOINTS)")
			}
			gopts, reload, err := srvSec.serverOptions(&g.sec, log)
			if err != nil {
				return err
			}
			cli, err := etcdClient(endpoints, &etcdSec)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reloadOnHangup(ctx, log, reload)
			_, stopProf, err := prof.start(ctx, log)
			if err != nil {
				return err
			}
			defer stopProf()
			degOpts, err := deg.options()
			if err != nil {
				return err
			}
			arcOpts, closeArchive, err := arc.open(ctx, log)
			if err != nil {
				return err
			}
			defer closeArchive()
			gcf.compressWithArchive(cmd, len(arcOpts) > 0)
			opts := append(append([]scheduler.Option{scheduler.WithLogger(log), scheduler.WithPrefix(prefix), scheduler.WithRetention(retention)}, lim.options()...), gcf.schedulerOptions()...)
			opts = append(append(opts, degOpts...), arcOpts...)
			if id != "" {
				opts = append(opts, scheduler.WithID(id))
			}
			return serve(ctx, log, cli, listen, hf.listen, gopts, func(ctx context.Context, _ *scheduler.Server, addr string) error {
				log.Info("scheduler listening", "address", addr, "security", describe(gopts))
				if con.listen == "" {
					return nil
				}
				// The console calls this scheduler over TLS when it serves
				// TLS, verified with --tls-ca (else the system roots).
				sched := g.sec.dialConfig(loopback(addr))
				sched.TLS, sched.Token = gopts != nil, ""
				if gopts == nil {
					sched.CA, sched.Cert, sched.Key, sched.ServerName = "", "", "", ""
				}
				_, err := startConsole(ctx, log, cmd.OutOrStdout(), con.listen, sched, con.readOnly, "")
				return err
			}, opts...)
		},
	}
	cmd.Flags().StringSliceVar(&endpoints, "etcd-endpoints", envList("REEVE_ETCD_ENDPOINTS"), "etcd client URLs, comma-separated (env REEVE_ETCD_ENDPOINTS)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7430", "address the gRPC API listens on")
	cmd.Flags().StringVar(&id, "id", "", "scheduler instance id, unique among schedulers (default <hostname>-<random>)")
	cmd.Flags().StringVar(&prefix, "prefix", "/reeve/", "etcd key prefix")
	cmd.Flags().DurationVar(&retention, "retention", 72*time.Hour, "how long terminal tasks are kept in etcd without an archive; with one, how long FAILED tasks stay (the window to retry or compensate them)")
	arc.registerServer(cmd, g.getenv, "")
	con.register(cmd, "")
	srvSec.register(cmd, g.getenv)
	etcdSec.register(cmd, g.getenv)
	lim.register(cmd)
	deg.register(cmd)
	logs.register(cmd)
	tel.register(cmd)
	prof.register(cmd)
	hf.register(cmd)
	gcf.register(cmd, g.getenv, 100, false)
	return cmd
}

func newSupervisorCmd(g *globals) *cobra.Command {
	var (
		endpoints, schedulers []string
		id, prefix            string
		tick                  time.Duration
		ttl                   int
		logs                  logFlags
		tel                   telemetryFlags
		etcdSec               etcdSecurity
		hf                    healthFlag
	)
	cmd := &cobra.Command{
		Use:   "supervisor",
		Short: "Run a supervisor: recovers steps whose complete-by passed",
		Long: `supervisor campaigns in an etcd election with the other supervisors; the
leader wakes at the earliest deadline in etcd's deadline index (and at least
every --tick as a safety net), and asks a scheduler (any of --schedulers), in
batches, to retry the executions whose complete-by passed, compensate their
task, or fail it and raise an operator alert. Run two or more for availability.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd)
			if err != nil {
				return usageError{err}
			}
			flush, err := tel.start(cmd.Context(), log, "reeve-supervisor")
			if err != nil {
				return err
			}
			defer flush()
			if len(endpoints) == 0 {
				return usagef("--etcd-endpoints: required (or REEVE_ETCD_ENDPOINTS)")
			}
			if len(schedulers) == 0 {
				return usagef("--schedulers: required (or REEVE_SCHEDULERS)")
			}
			if _, err := g.sec.tlsConfig(); err != nil {
				return err // before connecting to etcd
			}
			cli, err := etcdClient(endpoints, &etcdSec)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := []supervisor.Option{supervisor.WithPrefix(prefix), supervisor.WithTick(tick), supervisor.WithSessionTTL(ttl)}
			if id != "" {
				opts = append(opts, supervisor.WithID(id))
			}
			waitSupervisor, err := startSupervisor(ctx, log, cli, schedulers, g.sec.dialConfig(""), opts...)
			if err != nil {
				return err
			}
			// Whatever ends the command ends the supervisor first.
			defer func() { stop(); waitSupervisor() }()
			// Healthy while the process runs: a supervisor that cannot reach
			// etcd or the schedulers is not fixed by a restart, and its
			// leadership lapses on its own (--session-ttl).
			hs := health.NewServer()
			stopHealth, err := serveHealth(log, hf.listen, hs)
			if err != nil {
				return err
			}
			defer stopHealth()
			<-ctx.Done()
			hs.Shutdown()
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&endpoints, "etcd-endpoints", envList("REEVE_ETCD_ENDPOINTS"), "etcd client URLs, comma-separated (env REEVE_ETCD_ENDPOINTS)")
	cmd.Flags().StringSliceVar(&schedulers, "schedulers", envList("REEVE_SCHEDULERS"), "scheduler addresses, comma-separated (env REEVE_SCHEDULERS)")
	cmd.Flags().StringVar(&id, "id", "", "supervisor id, recorded in task histories (default <hostname>-<random>)")
	cmd.Flags().StringVar(&prefix, "prefix", "/reeve/", "etcd key prefix (same as the schedulers')")
	cmd.Flags().DurationVar(&tick, "tick", time.Second, "safety-net pass over the deadline index (the leader wakes at the earliest deadline anyway)")
	cmd.Flags().IntVar(&ttl, "session-ttl", 10, "seconds before a dead leader's leadership lapses")
	etcdSec.register(cmd, g.getenv)
	logs.register(cmd)
	tel.register(cmd)
	hf.register(cmd)
	return cmd
}

// etcdClient connects to an external etcd cluster.
func etcdClient(endpoints []string, sec *etcdSecurity) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: store.DialOptions()}
	if err := sec.apply(&cfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

func envList(key string) []string {
	if v := os.Getenv(key); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// newGRPCServer returns the gRPC server of a scheduler: its three
// services, health and reflection. It refuses a server with a method the
// authorizer has no rule for (it would be refused to every caller in
// secure mode).
func newGRPCServer(srv *scheduler.Server, gopts []grpc.ServerOption) (*grpc.Server, *health.Server, error) {
	g := grpc.NewServer(append(append(scheduler.ServerOptions(), telemetry.ServerHandler()), gopts...)...)
	srv.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	if m := auth.Undecided(g.GetServiceInfo()); len(m) > 0 {
		return nil, nil, fmt.Errorf("no authorization rule for %s: decide who may call them in internal/auth", strings.Join(m, ", "))
	}
	return g, hs, nil
}

// serve runs a scheduler on listen until ctx ends, then shuts down in order:
// health reports NOT_SERVING, the scheduler drains its agents, the gRPC
// server stops gracefully (forcefully after 10s). started runs once the
// server listens. healthListen, when not empty, serves the same health
// status in plaintext (--health-listen).
func serve(ctx context.Context, log *slog.Logger, cli *clientv3.Client, listen, healthListen string, gopts []grpc.ServerOption,
	started func(context.Context, *scheduler.Server, string) error, opts ...scheduler.Option) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := scheduler.New(cli, opts...)
	lis = srv.Listener(lis)
	g, hs, err := newGRPCServer(srv, gopts)
	if err != nil {
		return err
	}
	healthCtx, stopHealth := context.WithCancel(context.Background())
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); srv.ReportHealth(healthCtx, hs, time.Second) }()
	defer func() { stopHealth(); <-healthDone }()
	stopHealthListener, err := serveHealth(log, healthListen, hs)
	if err != nil {
		return err
	}
	defer stopHealthListener()

	// Nothing is served, so nothing written, before etcd's layout version
	// is checked (it waits while etcd cannot be reached; the health
	// listener answers meanwhile: alive, not ready).
	if err := srv.CheckLayout(ctx); err != nil {
		_ = lis.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	runCtx, stopRun := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run(runCtx) }()

	appCtx, stopApp := context.WithCancel(ctx)
	defer stopApp()
	if err := started(appCtx, srv, lis.Addr().String()); err != nil {
		stopApp()
		stopRun()
		g.Stop()
		return err
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("grpc server stopped", "err", err)
	}
	log.Info("shutting down")
	stopHealth()
	<-healthDone
	hs.Shutdown()
	stopApp() // demo agents and the like first
	stopRun()
	err = <-runErr
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		g.Stop()
	}
	return err
}

package bench

import (
	"cmp"
	"context"
	"net"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/etcdserver"
	"github.com/reeve-org/reeve/scheduler"
	"github.com/reeve-org/reeve/supervisor"
)

// startEmbedded runs etcd (fsync on unless NoFsync), a scheduler serving
// gRPC on a loopback port and a supervisor acting through it, as `reeve dev`
// does.
func startEmbedded(ctx context.Context, cfg Config) (*target, error) {
	dir := cfg.DataDir
	cleanup := func() {}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "reeve-bench-")
		if err != nil {
			return nil, err
		}
		dir, cleanup = tmp, func() { _ = os.RemoveAll(tmp) }
	}
	etcd, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: dir, UnsafeNoFsync: cfg.NoFsync, QuotaBytes: cfg.QuotaBytes, Logger: zap.NewNop()})
	if err != nil {
		cleanup()
		return nil, err
	}
	cli := etcd.Client()
	closeCli := func() {}
	if cfg.QuotaBytes > 0 {
		// A flood drives the scheduler to reclaim space, and etcd's
		// in-process client panics on Defragment (its maintenance server
		// has no health notifier): talk to etcd over its client port.
		cli, err = clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			etcd.Close()
			cleanup()
			return nil, err
		}
		closeCli = func() { _ = cli.Close() }
	}
	etcdClose := func() { closeCli(); etcd.Close() }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		etcdClose()
		cleanup()
		return nil, err
	}
	opts := []scheduler.Option{scheduler.WithLogger(cfg.Log), scheduler.WithEmbeddedDefragmenter(etcd.Defragment)}
	if cfg.CommitWindow != 0 {
		opts = append(opts, scheduler.WithCommitWindow(max(cfg.CommitWindow, 0)))
	}
	if cfg.RecordCompression {
		opts = append(opts, scheduler.WithRecordCompression(true))
	}
	if cfg.AckTimeout > 0 {
		opts = append(opts, scheduler.WithAckTimeout(cfg.AckTimeout))
	}
	if cfg.OverloadTarget != 0 || cfg.OverloadInterval != 0 {
		target := cmp.Or(cfg.OverloadTarget, scheduler.DefaultOverloadTarget)
		opts = append(opts, scheduler.WithOverload(max(target, 0), cmp.Or(cfg.OverloadInterval, scheduler.DefaultOverloadInterval)),
			scheduler.WithOverloadAgentQueues(cfg.OverloadAgentQueues), scheduler.WithOverloadCPU(cfg.OverloadCPU))
	}
	if cfg.Retention > 0 {
		opts = append(opts, scheduler.WithRetention(cfg.Retention), scheduler.WithSweepInterval(min(time.Minute, cfg.Retention)))
	}
	if cfg.SpaceReservePerStep != 0 {
		opts = append(opts, scheduler.WithSpaceReserve(max(cfg.SpaceReservePerStep, 0)))
	}
	if cfg.SpaceCheckInterval > 0 {
		opts = append(opts, scheduler.WithSpaceCheckInterval(cfg.SpaceCheckInterval))
	}
	if cfg.SpaceReclaim != 0 {
		opts = append(opts, scheduler.WithSpaceReclaim(max(cfg.SpaceReclaim, 0)))
	}
	if cfg.archive != nil {
		opts = append(opts, scheduler.WithArchive(cfg.archive, cfg.ArchiveGrace))
		if cfg.ArchiveRetention > 0 {
			opts = append(opts, scheduler.WithArchiveRetention(cfg.ArchiveRetention))
		}
		if cfg.ArchiveInterval > 0 {
			opts = append(opts, scheduler.WithArchiveInterval(cfg.ArchiveInterval))
		}
	}
	srv := scheduler.New(cli, opts...)
	if err := srv.CheckLayout(ctx); err != nil { // a --data-dir a newer Reeve wrote
		_ = lis.Close()
		etcdClose()
		cleanup()
		return nil, err
	}
	g := grpc.NewServer(scheduler.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = srv.Run(runCtx); close(ran) }()
	sched := dial.Config{Address: lis.Addr().String()} // plaintext
	supCC, err := dial.Schedulers(sched)
	if err != nil {
		stopRun()
		<-ran
		g.Stop()
		etcdClose()
		cleanup()
		return nil, err
	}
	sup, err := supervisor.New(cli, []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(supCC)},
		supervisor.WithLogger(cfg.Log), supervisor.WithSessionTTL(2))
	if err != nil {
		stopRun() // only for invalid options
		<-ran
		_ = supCC.Close()
		g.Stop()
		etcdClose()
		cleanup()
		return nil, err
	}
	supRan := make(chan struct{})
	go func() { _ = sup.Run(runCtx); close(supRan) }()
	return &target{
		sched:    sched,
		dbSize:   etcd.DBSize,
		etcd:     cli,
		applied:  func(context.Context) (uint64, error) { return etcd.AppliedIndex(), nil },
		counters: localEtcdCounters,
		close: func() {
			stopRun()
			<-ran
			<-supRan
			_ = supCC.Close()
			stopped := make(chan struct{})
			go func() { g.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				g.Stop()
			}
			etcdClose()
			cleanup()
		},
	}, nil
}

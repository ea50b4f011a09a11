// Package testenv starts real Reeve components for tests: an embedded etcd
// member and schedulers serving gRPC on loopback ports. Everything stops when
// the test ends.
package testenv

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/scheduler"
)

// Env is one etcd member and the schedulers started on it.
type Env struct {
	t    testing.TB
	Etcd *etcdtest.Member
}

// New starts an etcd member configured by opts.
func New(t testing.TB, opts ...etcdtest.Option) *Env {
	t.Helper()
	return &Env{t: t, Etcd: etcdtest.New(t, opts...)}
}

// Scheduler is a scheduler serving gRPC on a loopback port.
type Scheduler struct {
	*scheduler.Server
	// Addr is the host:port the scheduler listens on.
	Addr string

	grpc    *grpc.Server
	client  *clientv3.Client
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

// StartScheduler starts a scheduler with opts (plus a quiet logger and no
// overload shedding unless given) on a free port; addr "" means 127.0.0.1:0, else it listens there
// (to restart a scheduler at the same address).
func (e *Env) StartScheduler(addr string, opts ...scheduler.Option) *Scheduler {
	e.t.Helper()
	return e.StartSchedulerGRPC(addr, nil, opts...)
}

// StartSchedulerGRPC is StartScheduler with extra gRPC server options (TLS
// credentials, the auth interceptors).
func (e *Env) StartSchedulerGRPC(addr string, gopts []grpc.ServerOption, opts ...scheduler.Option) *Scheduler {
	e.t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: store.DialOptions()})
	if err != nil {
		e.t.Fatalf("etcd client: %v", err)
	}
	// Overload shedding is off unless a test turns it on: it acts on
	// measured waits, which a loaded test machine lengthens.
	opts = append([]scheduler.Option{scheduler.WithLogger(Logger()), scheduler.WithDrainTimeout(2 * time.Second), scheduler.WithOverload(0, 0), scheduler.WithRecordCompression(true)}, opts...)
	srv := scheduler.New(cli, opts...)
	lis, err := listen(addr)
	if err != nil {
		e.t.Fatalf("listen: %v", err)
	}
	g := grpc.NewServer(append(scheduler.ServerOptions(), gopts...)...)
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Scheduler{Server: srv, Addr: lis.Addr().String(), grpc: g, client: cli, cancel: cancel, done: make(chan struct{})}
	go func() { _ = g.Serve(srv.Listener(lis)) }()
	go func() {
		defer close(s.done)
		if err := srv.Run(ctx); err != nil {
			e.t.Errorf("scheduler run: %v", err)
		}
	}()
	e.t.Cleanup(s.Stop)
	return s
}

// listen retries briefly: a just-closed listener's port can take a moment
// to be free again.
func listen(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var lis net.Listener
		if lis, err = net.Listen("tcp", addr); err == nil {
			return lis, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// Stop shuts the scheduler down gracefully: agents are drained. Safe to call
// twice.
func (s *Scheduler) Stop() {
	s.stopped.Do(func() {
		s.cancel()
		<-s.done
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			s.grpc.Stop()
		}
		_ = s.client.Close()
	})
}

// Kill stops the scheduler abruptly, as a crash would: streams break with no
// drain. Its lease expires on its own. Safe to call twice.
func (s *Scheduler) Kill() {
	s.stopped.Do(func() {
		s.grpc.Stop()
		_ = s.client.Close()
		s.cancel()
		<-s.done
	})
}

// Crash stops the scheduler as SIGKILL would, more strictly than Kill: its
// etcd client goes first, so nothing it would do on the way down (such as
// writing down its agents' heartbeat deadlines) reaches etcd; its lease
// expires on its own. Safe to call twice, and with Kill.
func (s *Scheduler) Crash() {
	s.stopped.Do(func() {
		_ = s.client.Close()
		s.grpc.Stop()
		s.cancel()
		<-s.done
	})
}

// Dial returns a client connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	return DialWith(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// DialWith returns a client connection to addr with opts (e.g. TLS
// credentials), closed when the test ends.
func DialWith(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Client returns a SchedulerService client of s.
func (s *Scheduler) Client(t testing.TB) reevev1.SchedulerServiceClient {
	return reevev1.NewSchedulerServiceClient(Dial(t, s.Addr))
}

// Logger is a logger that discards everything, for components under test;
// set REEVE_TEST_LOG=1 (see logger.go) to see their logs.
func Logger() *slog.Logger {
	if verbose {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

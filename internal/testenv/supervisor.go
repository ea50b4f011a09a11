package testenv

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/supervisor"
)

// Supervisor is a running supervisor with its own etcd client.
type Supervisor struct {
	*supervisor.Supervisor
	client  *clientv3.Client
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

// StartSupervisor starts a supervisor acting through the given schedulers,
// ticking every 100ms with a 2s session unless opts say otherwise.
func (e *Env) StartSupervisor(schedulers []*Scheduler, opts ...supervisor.Option) *Supervisor {
	e.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: store.DialOptions()})
	if err != nil {
		e.t.Fatalf("etcd client: %v", err)
	}
	var clients []reevev1.SupervisorServiceClient
	for _, s := range schedulers {
		clients = append(clients, reevev1.NewSupervisorServiceClient(Dial(e.t, s.Addr)))
	}
	opts = append([]supervisor.Option{supervisor.WithLogger(Logger()), supervisor.WithTick(100 * time.Millisecond), supervisor.WithSessionTTL(2)}, opts...)
	sup, err := supervisor.New(cli, clients, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Supervisor{Supervisor: sup, client: cli, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = sup.Run(ctx)
	}()
	e.t.Cleanup(s.Stop)
	return s
}

// Stop stops the supervisor gracefully: it resigns. Safe to call twice.
func (s *Supervisor) Stop() {
	s.stopped.Do(func() {
		s.cancel()
		<-s.done
		_ = s.client.Close()
	})
}

// Kill stops the supervisor as a crash would: its etcd client goes away
// without resigning, and its leadership lapses only when its session's
// lease expires. Safe to call twice.
func (s *Supervisor) Kill() {
	s.stopped.Do(func() {
		_ = s.client.Close()
		s.cancel()
		<-s.done
	})
}

// Package scheduler is Reeve's scheduler: the gRPC services clients and
// agents talk to. It records tasks in etcd, dispatches ready steps to agents
// connected over AgentService.Connect, and advances workflows as results
// arrive. Any number of schedulers can share one etcd: claims are etcd
// transactions, so each attempt is dispatched by exactly one of them.
//
//	srv := scheduler.New(etcdClient)
//	g := grpc.NewServer()
//	srv.Register(g)
//	go g.Serve(lis)
//	err := srv.Run(ctx) // until ctx ends, then drains agents
package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// Server is the scheduler's engine. Its gRPC services (reeve.v1's
// SchedulerService, AgentService and SupervisorService) are types of their
// own over it (services.go); Register registers them.
type Server struct {
	opts  options
	store *store.Store
	log   *slog.Logger
	tel   *instruments

	// The parts, each owning the loops Run starts for it:
	eng    *engine      // task writes (engine.go)
	disp   *dispatcher  // the ready queue and the claims (dispatch.go)
	agents *agents      // agent streams (connect.go)
	adm    *admission   // limits on submissions and lists (admission.go)
	mover  *mover       // deletes or archives finished tasks (archive.go)
	batch  *batchRunner // runs batch jobs (batches.go)
	// schedules fires schedules for the supervisor leader and serves
	// ScheduleService (schedules.go, schedule_fire.go).
	schedules *schedules
	// dedup answers archive lookups while the archive is unavailable
	// (dedup.go); nil without an archive or with WithArchiveDedupWindow(0).
	dedup *dedupWindow

	// The gRPC services over them (services.go), built once in New.
	scheduler  *schedulerService
	agent      *agentService
	supervisor *supervisorService
	batches    *batchService
	schedule   *scheduleService
	queue      *queueService // QueueService: flow control (queues.go, limits.go)

	// base outlives client and agent streams so that a result that arrived is
	// recorded even when its stream breaks; canceled after the drain.
	base       context.Context
	cancelBase context.CancelFunc
	work       *workGroup // result handlers, claims, take-backs: what Run's stop waits for
	// stopTimers ends agents.stopping when Run's context ends: the timers
	// of dropped agents' heartbeat executions stop (heartbeats.go).
	stopTimers context.CancelFunc

	mu    sync.Mutex
	lease clientv3.LeaseID // current instance lease, 0 while etcd is unreachable

}

// New returns a scheduler using the etcd client c, which the caller keeps
// owning. Call Register, then Run.
func New(c *clientv3.Client, opts ...Option) *Server {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	base, cancel := context.WithCancel(context.Background())
	stopping, stopTimers := context.WithCancel(context.Background())
	s := &Server{
		opts:       o,
		store:      store.New(c, append([]store.Option{store.WithPrefix(o.prefix), store.WithMeterProvider(o.meter), store.WithMaxTxnOps(cmp.Or(o.maxTxnOps, store.DefaultMaxTxnOps)), store.WithLogger(o.log.With("scheduler_id", o.id))}, o.storeOpts...)...),
		log:        o.log.With("scheduler_id", o.id),
		base:       base,
		cancelBase: cancel,
		work:       newWorkGroup(),
		stopTimers: stopTimers,
	}
	tasks := taskread.New(s.store, o.archive)
	var lookups *archiveLookups
	if o.archive != nil {
		// Real time: a test's fake clock must not keep the archive "down".
		lookups = newArchiveLookups(base, tasks, time.Now)
		if o.archiveDedupWindow > 0 {
			s.dedup = newDedupWindow(o.archiveDedupWindow, o.clock.Now)
		}
	}
	logs := newLogLimiter(o.clock, 10*time.Second)
	space := &spaceGuard{opts: &s.opts, store: s.store, log: s.log}
	shed := newOverload(o, s.log, o.meter.Meter(telemetry.ScopeName+"/scheduler"))
	s.adm = newAdmission(&s.opts, s.store, space, shed)
	s.mover = &mover{opts: &s.opts, store: s.store, log: s.log, namespaces: metNamespaces{met: map[string]time.Time{}}}
	s.tel = newInstruments(s)
	s.mover.tel = s.tel
	s.eng = &engine{
		id: o.id, clock: o.clock, log: s.log, logs: logs, store: s.store, tasks: tasks, tel: s.tel, shed: shed,
		base: base, dispatchOnSubmit: o.dispatchOnSubmit, created: s.adm.created,
		tokens: &completionTokens{store: s.store},
	}
	s.disp = newDispatcher(dispatchDeps{
		id: o.id, clock: o.clock, log: s.log, logs: logs, store: s.store,
		ackTimeout: o.ackTimeout, claimConcurrency: o.claimConcurrency,
		claimEntry: s.eng.claim, takeBackNow: s.eng.takeBack, expireNow: s.eng.expireNow, admitTask: s.eng.admitKey, adoptSlot: s.eng.adoptSlot, work: s.work,
	})
	s.eng.disp = s.disp
	s.disp.flow.idle = s.tel.observeSlotIdle
	s.agents = &agents{
		opts: &s.opts, eng: s.eng, disp: s.disp, store: s.store, log: s.log, logs: logs, tel: s.tel,
		base: base, stopping: stopping, work: s.work, lease: s.currentLease,
		expiries: make(chan struct{}, expiriesInFlight),
	}
	s.scheduler = &schedulerService{
		opts: &s.opts, log: s.log, eng: s.eng, store: s.store, tasks: tasks, adm: s.adm, disp: s.disp, tel: s.tel,
		lookups: lookups, dedup: s.dedup,
	}
	s.agent = &agentService{agents: s.agents}
	s.schedules = &schedules{opts: &s.opts, store: s.store, log: s.log, tel: newScheduleInstruments(o.meter, o.tracer), scheduler: s.scheduler,
		starts: newSelfStarts(s.opts.clock, s.eng.startRun)}
	s.eng.scheduledStart = s.schedules.tel.scheduledStart
	s.supervisor = &supervisorService{opts: &s.opts, log: s.log, eng: s.eng, store: s.store, schedules: s.schedules}
	s.batches = &batchService{opts: &s.opts, store: s.store}
	s.schedule = &scheduleService{sch: s.schedules}
	s.queue = &queueService{opts: &s.opts, log: s.log, store: s.store, disp: s.disp}
	s.batch = &batchRunner{opts: &s.opts, store: s.store, tasks: tasks, log: s.log, lease: s.currentLease,
		scheduler: s.scheduler, supervisor: s.supervisor, running: map[string]bool{}}
	return s
}

// ID returns the scheduler instance id.
func (s *Server) ID() string { return s.opts.id }

// ServerOptions are the gRPC server options a scheduler needs, with the
// default limits (DefaultGRPCLimits): keepalive enforcement that admits the
// SDK's pings (every 30s, also without active streams), server pings that
// find dead agent connections within 40s, and explicit bounds on messages,
// headers and streams, and requests that fail protobuf decoding answered
// INVALID_ARGUMENT rather than gRPC's INTERNAL (a codec and two
// interceptors, chained first: keep the options together, and do not
// replace the server codec). Pass them to grpc.NewServer along with your
// own.
func ServerOptions() []grpc.ServerOption { return ServerOptionsWith(DefaultGRPCLimits()) }

// GRPCLimits are the gRPC server's bounds (see docs/limits.md).
type GRPCLimits struct {
	// MaxRecvMsgBytes bounds one received message; larger ones fail the
	// call (or end the stream) with RESOURCE_EXHAUSTED before any handler
	// sees them. Default 8 MiB: room for a result several times the 64 KiB
	// output limit, so that an oversized result is refused on its own
	// instead of ending the agent's stream.
	MaxRecvMsgBytes int
	// MaxHeaderListBytes bounds the headers (metadata) of one request;
	// default 64 KiB. gRPC's own default is 16 MiB.
	MaxHeaderListBytes uint32
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): clients queue further calls
	// until one ends. Default 1000; gRPC's own default is unlimited.
	MaxConcurrentStreams uint32
}

// DefaultGRPCLimits returns the default GRPCLimits.
func DefaultGRPCLimits() GRPCLimits {
	return GRPCLimits{MaxRecvMsgBytes: 8 << 20, MaxHeaderListBytes: 64 << 10, MaxConcurrentStreams: 1000}
}

// ServerOptionsWith is ServerOptions with the given limits.
func ServerOptionsWith(l GRPCLimits) []grpc.ServerOption {
	return append(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(errorUnary), grpc.ChainStreamInterceptor(errorStream)}, decodeOptions()...),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgBytes),
		grpc.MaxHeaderListSize(l.MaxHeaderListBytes),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
	)
}

// Register registers the scheduler's services on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	reevev1.RegisterSchedulerServiceServer(g, s.scheduler)
	reevev1.RegisterAgentServiceServer(g, s.agent)
	reevev1.RegisterSupervisorServiceServer(g, s.supervisor)
	reevev1.RegisterBatchServiceServer(g, s.batches)
	reevev1.RegisterScheduleServiceServer(g, s.schedule)
	reevev1.RegisterQueueServiceServer(g, s.queue)
}

// QueueService returns the reeve.v1.QueueService that Register registers,
// for calls in the same process (no interceptor runs).
func (s *Server) QueueService() reevev1.QueueServiceServer { return s.queue }

// SchedulerService returns the reeve.v1.SchedulerService that Register
// registers, for calls in the same process that bypass gRPC: no
// interceptor runs (no authorization, and errors lack the details that
// ServerOptions' interceptors add).
func (s *Server) SchedulerService() reevev1.SchedulerServiceServer { return s.scheduler }

// ScheduleService returns the reeve.v1.ScheduleService that Register
// registers, for calls in the same process (no interceptor runs).
func (s *Server) ScheduleService() reevev1.ScheduleServiceServer { return s.schedule }

// Run checks etcd's layout version (CheckLayout; a newer one is returned
// at once as the error), dispatches work until ctx ends, then shuts down
// in order:
//  1. stop dispatching new attempts (claims in flight finish: they run on
//     the server's lifetime context), and the timers of dropped agents'
//     heartbeat executions (their disconnected/ keys go with the lease, and
//     the supervisor takes over: heartbeats.go);
//  2. send Drain to every agent and wait (up to the drain timeout) for them
//     to close their streams, so running steps report through other
//     schedulers; an attempt claimed after its agent was told to drain, or
//     left unsent when its stream ended, is taken back (queued again at
//     once), never left locked to an agent that did not get it;
//  3. wait for results, claims and take-backs in flight to be recorded:
//     no new result write or claim starts, but the take-back of an attempt
//     a write in flight claimed does, and is waited for too (workGroup);
//  4. revoke the instance lease.
//
// It returns nil after a shutdown, or the first fatal error.
func (s *Server) Run(ctx context.Context) error {
	defer s.cancelBase()
	if err := s.CheckLayout(ctx); err != nil {
		return s.stopUnstarted(ctx, err)
	}
	if _, err := s.eng.tokens.load(ctx); err != nil { // completion.go
		return s.stopUnstarted(ctx, err)
	}
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { s.keepSession(runCtx) })
	wg.Go(func() { s.mover.run(runCtx) })
	wg.Go(func() { s.batch.run(runCtx) })
	wg.Go(func() { s.schedules.starts.run(runCtx) })
	if s.dedup != nil {
		wg.Go(func() {
			s.dedup.run(runCtx, s.store, s.opts.sweepInterval, func(msg string, err error) { s.log.Warn(msg, "err", err) })
		})
	}
	wg.Go(func() { s.disp.run(runCtx) })
	wg.Go(func() { s.adm.space.watch(runCtx) })
	wg.Go(func() { s.agents.publishLoads(runCtx) })
	wg.Go(func() { s.agents.warnUnserved(runCtx) })
	wg.Go(func() { backfillIndexes(runCtx, s.store, s.log, s.opts.clock) })
	<-ctx.Done()
	s.stopTimers()
	stop()
	wg.Wait()

	s.disp.drainAgents(s.opts.drainTimeout)
	s.work.closeAndWait()
	return nil
}

// keepSession holds the instance lease that agent records live under, and
// gets a new one whenever it is lost.
func (s *Server) keepSession(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.store.Client(), concurrency.WithTTL(s.opts.sessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			s.log.Warn("instance session", "err", err)
			select {
			case <-ctx.Done():
			case <-s.opts.clock.After(time.Second):
			}
			continue
		}
		if _, err := s.store.Client().Put(ctx, s.store.SchedulerKey(s.opts.id), "", clientv3.WithLease(sess.Lease())); err != nil {
			s.log.Warn("register scheduler instance", "err", err)
		}
		s.mu.Lock()
		s.lease = sess.Lease()
		s.mu.Unlock()
		s.agents.republishAgents(ctx)
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.lease = 0
			s.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = s.store.Client().Revoke(cctx, sess.Lease())
			cancel()
			_ = sess.Close()
			return
		case <-sess.Done():
			s.log.Warn("instance session lost; starting a new one")
		}
	}
}

func (s *Server) currentLease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

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
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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
	// The gRPC services over this engine (services.go), built once in New.
	scheduler  *schedulerService
	agent      *agentService
	supervisor *supervisorService

	opts  options
	store *store.Store
	log   *slog.Logger
	disp  *dispatcher
	tel   *instruments
	adm   *admission
	space *spaceGuard
	shed  *overload     // nil when shedding is off (WithOverload)
	lists chan struct{} // one slot per ListTasks in progress (WithMaxConcurrentLists)
	logs  *logLimiter   // rate-limits log lines of failures that repeat per task

	// base outlives client and agent streams so that a result that arrived is
	// recorded even when its stream breaks; canceled after the drain.
	base       context.Context
	cancelBase context.CancelFunc
	work       *workGroup // result handlers, claims, take-backs: what Run's stop waits for

	unregistered atomic.Int64 // agent streams waiting for their Register
	// archiveCaughtUp is the grace cutoff (unix ns) of the last archive pass
	// that reached the end of the tasks due (archive.go).
	archiveCaughtUp atomic.Int64
	// tasks reads tasks from etcd and then the archive (internal/taskread).
	tasks *taskread.Reader
	// lookups batches SubmitTask's archive checks; nil without an archive.
	lookups *archiveLookups
	// dedup answers them while the archive is unavailable; nil without an
	// archive or with WithArchiveDedupWindow(0).
	dedup *dedupWindow
	// archivedNamespaces: whose alerts the retention sweep deletes too
	// (sweepArchivedAlerts).
	archivedNamespaces metNamespaces

	// stopping ends when Run's context does: the timers of dropped agents'
	// heartbeat executions stop (heartbeats.go).
	stopping   context.Context
	stopTimers context.CancelFunc
	expiries   chan struct{} // one slot per recovery of a dropped agent's execution in flight

	mu    sync.Mutex
	lease clientv3.LeaseID // current instance lease, 0 while etcd is unreachable

	schedTel *scheduleInstruments // the schedules' metrics and spans (schedule_telemetry.go)
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
		stopping:           stopping,
		stopTimers:         stopTimers,
		expiries:           make(chan struct{}, expiriesInFlight),
		archivedNamespaces: metNamespaces{met: map[string]time.Time{}},
		opts:               o,
		store:              store.New(c, append([]store.Option{store.WithPrefix(o.prefix), store.WithMeterProvider(o.meter), store.WithMaxTxnOps(cmp.Or(o.maxTxnOps, store.DefaultMaxTxnOps)), store.WithLogger(o.log.With("scheduler_id", o.id))}, o.storeOpts...)...),
		log:                o.log.With("scheduler_id", o.id),
		base:               base,
		cancelBase:         cancel,
		work:               newWorkGroup(),
	}
	s.tasks = taskread.New(s.store, o.archive)
	if o.archive != nil {
		// Real time: a test's fake clock must not keep the archive "down".
		s.lookups = newArchiveLookups(base, s.tasks, time.Now)
		if o.archiveDedupWindow > 0 {
			s.dedup = newDedupWindow(o.archiveDedupWindow, o.clock.Now)
		}
	}
	s.logs = newLogLimiter(o.clock, 10*time.Second)
	s.disp = newDispatcher(dispatchDeps{
		id: o.id, clock: o.clock, log: s.log, logs: s.logs, store: s.store,
		ackTimeout: o.ackTimeout, claimConcurrency: o.claimConcurrency,
		claimEntry: s.claim, takeBackNow: s.takeBack, expireNow: s.expireNow, work: s.work,
	})
	s.tel = newInstruments(s)
	s.schedTel = newScheduleInstruments(o.meter, o.tracer)
	s.adm = newAdmission(s)
	s.space = &spaceGuard{s: s}
	s.shed = newOverload(o, s.log, o.meter.Meter(telemetry.ScopeName+"/scheduler"))
	s.lists = make(chan struct{}, max(o.maxLists, 1))
	s.scheduler = &schedulerService{eng: s}
	s.agent = &agentService{eng: s}
	s.supervisor = &supervisorService{eng: s}
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
	reevev1.RegisterScheduleServiceServer(g, s.ScheduleService())
}

// SchedulerService returns the reeve.v1.SchedulerService that Register
// registers, for calls in the same process that bypass gRPC: no
// interceptor runs (no authorization, and errors lack the details that
// ServerOptions' interceptors add).
func (s *Server) SchedulerService() reevev1.SchedulerServiceServer { return s.scheduler }

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
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { s.keepSession(runCtx) })
	wg.Go(func() { s.sweep(runCtx) })
	if s.opts.archive != nil {
		wg.Go(func() { s.archiveTasks(runCtx) })
	}
	if s.dedup != nil {
		wg.Go(func() {
			s.dedup.run(runCtx, s.store, s.opts.sweepInterval, func(msg string, err error) { s.log.Warn(msg, "err", err) })
		})
	}
	wg.Go(func() { s.disp.run(runCtx) })
	wg.Go(func() { s.space.watch(runCtx) })
	wg.Go(func() { s.publishLoads(runCtx) })
	wg.Go(func() { s.backfillIndexes(runCtx) })
	<-ctx.Done()
	s.stopTimers()
	stop()
	wg.Wait()

	s.disp.drainAgents(s.opts.drainTimeout)
	s.work.closeAndWait()
	return nil
}

// goWork runs f in a goroutine that Run waits for before it returns, unless
// Run is already waiting (the server stopped): then f does not run and
// goWork reports false. Stream handlers can outlive Run (grpc.Server.Stop
// does not wait for them).
func (s *Server) goWork(f func()) bool {
	return s.work.goOptional(f)
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
		s.republishAgents(ctx)
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

// sweep deletes terminal tasks past their retention (moves them to the
// archive when there is one), and alerts raised before it.
func (s *Server) sweep(ctx context.Context) {
	s.sweepEvery(ctx, s.opts.sweepInterval, "sweep ended tasks", func() store.Sweep {
		before := s.opts.clock.Now().Add(-s.opts.retention)
		sw := store.Sweep{Before: before, AlertsBefore: before}
		if s.opts.archive != nil {
			sw.Keep = s.keepInArchive
		}
		return sw
	}, func() {
		if s.opts.archive != nil {
			s.sweepArchivedAlerts(ctx)
		}
	})
}

// sweepEvery runs passes of store.SweepEnded every interval until ctx
// ends: each pass deletes what sweepOf describes (its From and Limit set
// here), page after page, and then calls after. A pass continues where the
// last one ended (the cursor), and starts again from the beginning of the
// ended index every sweepRescanEvery passes, for what a
// cursor passes by: a task whose record changed while it was swept, or one
// ended by a scheduler whose clock is behind this one's. caughtUp, when
// set, is called with the cutoff of a pass that reached the end.
func (s *Server) sweepEvery(ctx context.Context, interval time.Duration, what string, sweepOf func() store.Sweep, after func(), caughtUp ...func(time.Time)) {
	t := s.opts.clock.NewTicker(interval)
	defer t.Stop()
	var cursor string
	for pass := 0; ; pass++ {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if pass%sweepRescanEvery == 0 {
			cursor = ""
		}
		for {
			sw := sweepOf()
			sw.From, sw.Limit = cursor, archiveBatch
			n, next, more, err := s.store.SweepEnded(ctx, sw)
			if err != nil {
				// The next pass starts again where this page did (a
				// rescan of the whole index under load, after a timeout,
				// fell further behind).
				if !errors.Is(err, context.Canceled) {
					s.log.Warn(what, "err", err)
				}
				break
			}
			cursor = next
			if n > 0 {
				s.log.Debug(what, "count", n)
			}
			if !more {
				for _, f := range caughtUp {
					f(sw.Before)
				}
				break
			}
		}
		after()
	}
}

// sweepRescanEvery is how many sweeps pass between two that start from the
// beginning of the ended index.
const sweepRescanEvery = 10

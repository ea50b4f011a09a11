package scheduler

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

// SubmitTask and what it admits: a token bucket per client and a cap on a
// namespace's active tasks (admission), and no new task while etcd is near
// its space quota (spaceGuard). A task is created claimed for an idle agent
// here when there is one (claim.go).

// SubmitTask implements SchedulerService.
func (s *Server) SubmitTask(ctx context.Context, req *reevev1.SubmitTaskRequest) (*reevev1.SubmitTaskResponse, error) {
	if err := s.adm.allowSubmit(ctx); err != nil {
		return nil, statusErr(err)
	}
	if err := s.space.allow(); err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateSubmit(req); err != nil {
		return nil, statusErr(err)
	}
	req = proto.Clone(req).(*reevev1.SubmitTaskRequest)
	req.Namespace = workflow.Namespace(req.GetNamespace())
	if err := s.adm.allowActive(ctx, req.GetNamespace()); err != nil {
		// Idempotency wins over the limit: a retried submission of a task
		// that exists gets it back.
		if t := s.sameSubmission(ctx, req); t != nil {
			return &reevev1.SubmitTaskResponse{Task: t}, nil
		}
		return nil, statusErr(err)
	}
	generated := req.GetTaskId() == ""
	if generated {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, statusErr(err)
		}
		req.TaskId = id.String()
	}
	wf, latest, err := s.resolveWorkflow(ctx, req)
	if err != nil {
		return nil, statusErr(err)
	}
	digest, err := requestDigest(req)
	if err != nil {
		return nil, statusErr(err)
	}
	if err := s.shed.allow(req.GetNamespace(), wf); err != nil {
		// Idempotency wins over shedding (overload.go), as far as this
		// scheduler knows the task without asking etcd (knownSubmission).
		if t := s.knownSubmission(req, digest, generated); t != nil {
			return &reevev1.SubmitTaskResponse{Task: t}, nil
		}
		return nil, statusErr(err)
	}
	ctx, span := s.tel.startSubmit(ctx, req)
	defer span.End()
	if !generated {
		if rec, err := s.archivedSubmission(ctx, req); err != nil || rec != nil {
			if err != nil {
				return nil, statusErr(err)
			}
			if string(rec.GetRequestDigest()) != string(digest) {
				return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request (it ended and was moved to the archive)", req.GetTaskId()))
			}
			return &reevev1.SubmitTaskResponse{Task: rec.GetTask()}, nil
		}
	}
	existing, created, err := s.createTask(ctx, req, wf, digest, latest)
	if errors.Is(err, store.ErrStaleWorkflow) {
		// The cached latest version is not the latest any more (registered
		// through another scheduler): create the task on the version a
		// linearizable read returns. That read is the submission's
		// linearization point, so no compare is needed this time.
		ref := req.GetWorkflowRef()
		if wf, err = s.store.GetWorkflow(ctx, req.GetNamespace(), ref.GetName(), 0); err != nil {
			return nil, statusErr(err)
		}
		existing, created, err = s.createTask(ctx, req, wf, digest, false)
	}
	if err != nil {
		return nil, statusErr(err)
	}
	if !created && string(existing.GetRequestDigest()) != string(digest) {
		return nil, statusErr(refuse(codes.AlreadyExists, ReasonTaskAlreadyExists, "task_id: task %q already exists with a different request", req.GetTaskId()))
	}
	if created {
		s.adm.created(req.GetNamespace())
		s.tel.submittedOne(ctx, req.GetNamespace())
		s.log.InfoContext(ctx, "task submitted", "task_id", req.GetTaskId(), "namespace", req.GetNamespace(), "workflow", wf.GetName())
	}
	return &reevev1.SubmitTaskResponse{Task: existing.GetTask(), Created: created}, nil
}

// createTask creates the task of a submission running wf (which it keeps
// in the record), claimed on submit when an agent here has room. ofLatest:
// wf is the cached latest version, to be checked in the create's
// transaction (store.CreateTaskOfLatest).
func (s *Server) createTask(ctx context.Context, req *reevev1.SubmitTaskRequest, wf *reevev1.Workflow, digest []byte, ofLatest bool) (existing *storev1.TaskRecord, created bool, err error) {
	if d := s.opts.scheduleToStart; d > 0 && wf.GetDefaultScheduleToStartTimeout() == nil {
		wf.DefaultScheduleToStartTimeout = durationpb.New(d)
	}
	rec := &storev1.TaskRecord{
		Task:          taskstate.New(req.GetNamespace(), req.GetTaskId(), wf, req.GetInput(), s.opts.clock.Now()),
		RequestDigest: digest,
		TraceContext:  telemetry.Inject(ctx),
	}
	// With an agent idle here, the task is created with its first step
	// already claimed: one write instead of two
	// (WithDispatchOnSubmit; claim.go).
	var claim *writeClaim
	if s.opts.dispatchOnSubmit {
		claim = &writeClaim{d: s.disp}
		_ = claim.run(rec.GetTask(), "", s.opts.clock.Now(), nil)
	}
	began := s.opts.clock.Now()
	if ofLatest {
		existing, created, err = s.store.CreateTaskOfLatest(ctx, rec)
	} else {
		existing, created, err = s.store.CreateTask(ctx, rec)
	}
	if err == nil || errors.Is(err, store.ErrStaleWorkflow) {
		// A wait for etcd; a write refused at once (the store's queue
		// full, out of space) or cut short by the caller is none.
		s.shed.wrote(s.opts.clock.Since(began))
	}
	if claim != nil {
		// Created: the agent gets the step. The id was taken: the existing
		// task is the answer, and the reservation is released.
		s.deliverClaim(rec, claim.settle(err, created, "claim on submit"))
	}
	return existing, created, err
}

// sameSubmission returns the task req already created (same client-chosen
// id, same request), or nil.
func (s *Server) sameSubmission(ctx context.Context, req *reevev1.SubmitTaskRequest) *reevev1.Task {
	if req.GetTaskId() == "" {
		return nil
	}
	digest, err := requestDigest(req)
	if err != nil {
		return nil
	}
	rec, err := s.getTask(ctx, req.GetNamespace(), req.GetTaskId())
	if err != nil || string(rec.GetRequestDigest()) != string(digest) {
		return nil
	}
	return rec.GetTask()
}

// knownSubmission returns the task a refused submission already created
// when this scheduler's record cache has it (same client-chosen id, same
// request digest), or nil. It reads no etcd, so that a refusal stays cheap:
// a task created through another scheduler, or already ended, is not
// found, and the client's retry after the RetryInfo delay gets it.
func (s *Server) knownSubmission(req *reevev1.SubmitTaskRequest, digest []byte, generated bool) *reevev1.Task {
	if generated {
		return nil
	}
	rec, ok := s.store.CachedTask(req.GetNamespace(), req.GetTaskId())
	if !ok || string(rec.GetRequestDigest()) != string(digest) {
		return nil
	}
	return rec.GetTask()
}

// resolveWorkflow returns the workflow a submission runs, as the snapshot the
// task keeps (a copy the caller may modify). latest: it is the latest
// version the store's workflow cache knows, which the create must check.
func (s *Server) resolveWorkflow(ctx context.Context, req *reevev1.SubmitTaskRequest) (wf *reevev1.Workflow, latest bool, err error) {
	if inline := req.GetInlineWorkflow(); inline != nil {
		wf := proto.Clone(inline).(*reevev1.Workflow)
		wf.Namespace = req.GetNamespace()
		wf.Version = 0
		if proto.Size(wf) > workflow.MaxWorkflowBytes {
			return nil, false, &workflow.FieldError{Field: "inline_workflow", Reason: fmt.Sprintf("definition is %d bytes encoded, more than %d", proto.Size(wf), workflow.MaxWorkflowBytes)}
		}
		if err := s.store.CheckWorkflowOps("inline_workflow", wf); err != nil {
			return nil, false, err
		}
		return wf, false, nil
	}
	ref := req.GetWorkflowRef()
	return s.store.WorkflowForSubmit(ctx, req.GetNamespace(), ref.GetName(), ref.GetVersion())
}

// requestDigest fingerprints a submission, to tell an idempotent retry from a
// conflicting reuse of the task id.
func requestDigest(req *reevev1.SubmitTaskRequest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// activeCountTTL is how long a namespace's count of active tasks is reused
// before it is read from etcd again.
const activeCountTTL = time.Second

// maxRateClients bounds the per-client limiters kept; past it, limiters idle
// for a minute are dropped.
const maxRateClients = 10000

// admission applies the submission limits: a token bucket per client and a
// cap on a namespace's active (non-terminal) tasks.
type admission struct {
	s *Server

	mu       sync.Mutex
	limiters map[string]*clientLimiter
	active   map[string]*activeCount
}

type clientLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

// activeCount is a namespace's active tasks as last read from etcd, plus the
// tasks this scheduler created since.
type activeCount struct {
	mu      sync.Mutex // one etcd read per namespace at a time
	read    int64
	since   int64
	readAt  time.Time
	invalid bool
}

func newAdmission(s *Server) *admission {
	return &admission{s: s, limiters: map[string]*clientLimiter{}, active: map[string]*activeCount{}}
}

// actorOf is what a task's history records for a caller's action: role, and
// with authorization on, the caller's identity ("client/cert:billing").
func actorOf(ctx context.Context, role string) string {
	if p := auth.FromContext(ctx); p != nil {
		return role + "/" + p.Name
	}
	return role
}

// clientKey names the caller for rate limiting: its authenticated identity,
// else its IP address.
func clientKey(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Name
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		if host, _, err := net.SplitHostPort(pr.Addr.String()); err == nil {
			return "ip:" + host
		}
		return "addr:" + pr.Addr.String()
	}
	return "anonymous"
}

// allowSubmit takes a token from the caller's bucket, or refuses with
// RESOURCE_EXHAUSTED.
func (a *admission) allowSubmit(ctx context.Context) error {
	o := a.s.opts
	if o.submitRate <= 0 {
		return nil
	}
	key := clientKey(ctx)
	now := o.clock.Now()
	a.mu.Lock()
	l := a.limiters[key]
	if l == nil {
		if len(a.limiters) >= maxRateClients {
			for k, v := range a.limiters {
				if now.Sub(v.used) > time.Minute {
					delete(a.limiters, k)
				}
			}
		}
		l = &clientLimiter{lim: rate.NewLimiter(rate.Limit(o.submitRate), o.submitBurst)}
		a.limiters[key] = l
	}
	l.used = now
	ok := l.lim.AllowN(now, 1)
	a.mu.Unlock()
	if !ok {
		return refuse(codes.ResourceExhausted, ReasonRateLimited, "submit rate: %s is over %g submissions/s (burst %d); retry with backoff", key, o.submitRate, o.submitBurst)
	}
	return nil
}

func (a *admission) count(ns string) *activeCount {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.active[ns]
	if c == nil {
		c = &activeCount{invalid: true}
		a.active[ns] = c
	}
	return c
}

// allowActive refuses, with RESOURCE_EXHAUSTED, a new task in ns when the
// namespace has max active tasks. The count is read from etcd at most once
// per second per namespace and the tasks created here since are added: with
// several schedulers a burst within that second can overshoot the limit.
func (a *admission) allowActive(ctx context.Context, ns string) error {
	limit := int64(a.s.opts.maxActiveTasks)
	if limit <= 0 {
		return nil
	}
	c := a.count(ns)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := a.s.opts.clock.Now()
	if c.invalid || now.Sub(c.readAt) >= activeCountTTL {
		n, err := a.s.store.CountActive(ctx, ns)
		if err != nil {
			return err
		}
		c.read, c.since, c.readAt, c.invalid = n, 0, now, false
	}
	if c.read+c.since >= limit {
		return refuse(codes.ResourceExhausted, ReasonActiveTaskLimit, "namespace: %q has %d active tasks, the limit is %d; retry when some finish", ns, c.read+c.since, limit)
	}
	return nil
}

// created records a task created in ns.
func (a *admission) created(ns string) {
	if a.s.opts.maxActiveTasks <= 0 {
		return
	}
	c := a.count(ns)
	c.mu.Lock()
	c.since++
	c.mu.Unlock()
}

// spaceGuard refuses new tasks while etcd is near its space quota, so that
// the room left is for the tasks already running: their results,
// completions and compensations are never refused by it. It reads etcd's
// status every check interval and keeps the last answer; a failed read keeps
// the previous one (with etcd down, submissions fail UNAVAILABLE anyway).
type spaceGuard struct {
	s           *Server
	last        atomic.Pointer[spaceReading]
	lastReclaim time.Time // only watch's goroutine uses it
}

// watch refreshes the space until ctx ends.
func (g *spaceGuard) watch(ctx context.Context) {
	o := g.s.opts
	if o.spaceSoftLimit <= 0 || o.spaceCheckInterval <= 0 {
		return
	}
	t := o.clock.NewTicker(o.spaceCheckInterval)
	defer t.Stop()
	for {
		g.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// spaceReading is etcd's space with the room reserved for the work in
// flight: each execution queued or dispatched (counted from the ready and
// deadline indexes) will still write its claim, its result and its
// successors' records and history before compaction drops them.
type spaceReading struct {
	store.Space
	live     int64 // executions in flight (ready + deadline keys, an upper bound)
	reserved int64 // bytes reserved for them
}

func (g *spaceGuard) refresh(ctx context.Context) {
	raw, err := g.s.store.Space(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			g.s.log.Debug("read etcd space", "err", err)
		}
		return
	}
	sp := spaceReading{Space: raw}
	if per := g.s.opts.spaceReservePerStep; per > 0 {
		if ready, deadlines, err := g.s.store.CountLive(ctx); err == nil {
			sp.live = ready + deadlines
			sp.reserved = sp.live * per
		} else if prev := g.last.Load(); prev != nil {
			sp.live, sp.reserved = prev.live, prev.reserved
		}
	}
	if g.over(sp) && g.s.opts.spaceReclaimEvery > 0 && (g.lastReclaim.IsZero() || g.s.opts.clock.Since(g.lastReclaim) >= g.s.opts.spaceReclaimEvery) {
		g.lastReclaim = g.s.opts.clock.Now()
		var after store.Space
		after, err = g.s.store.Reclaim(ctx)
		switch {
		case err != nil:
			g.s.log.Warn("reclaim etcd space (compact, defragment, disarm NOSPACE)", "space", sp.String(), "err", err)
		default:
			g.s.log.Info("reclaimed etcd space: compacted, defragmented, NOSPACE disarmed if the database fits again",
				"before", sp.String(), "after", after.String(), "nospace_alarm", after.NoSpace)
			sp.Space = after
		}
	}
	prev := g.last.Swap(&sp)
	was, is := prev != nil && g.over(*prev), g.over(sp)
	switch {
	case is && !was:
		g.s.log.Warn("etcd near its space quota: refusing new tasks", "space", sp.String(), "reserved_bytes", sp.reserved, "live_executions", sp.live, "nospace_alarm", sp.NoSpace, "soft_limit", g.s.opts.spaceSoftLimit)
	case was && !is:
		g.s.log.Info("etcd space back under the soft limit: accepting new tasks", "space", sp.String())
	}
}

func (g *spaceGuard) over(sp spaceReading) bool {
	return sp.NoSpace || sp.Quota > 0 && float64(sp.InUse+sp.reserved)/float64(sp.Quota) >= g.s.opts.spaceSoftLimit
}

// allow refuses a new task with RESOURCE_EXHAUSTED while the last reading
// was over the soft limit or etcd's NOSPACE alarm was raised.
func (g *spaceGuard) allow() error {
	sp := g.last.Load()
	if g.s.opts.spaceSoftLimit <= 0 || sp == nil || !g.over(*sp) {
		return nil
	}
	if sp.NoSpace {
		return refuse(codes.ResourceExhausted, ReasonNoSpace,
			"etcd is out of space (NOSPACE alarm; %s): new tasks are refused until space is freed; the scheduler compacts and defragments etcd and disarms the alarm by itself once the database fits again; if live data fills it, delete data or raise the quota (see docs/degraded-modes.md; etcdctl alarm disarm)", sp)
	}
	return refuse(codes.ResourceExhausted, ReasonNoSpace,
		"etcd is near its space quota: %s, plus %.1f MiB reserved for the %d executions in flight to finish, at or over the %.0f%% soft limit; new tasks are refused until running tasks finish and retention and compaction free space, running tasks continue",
		sp.Space, float64(sp.reserved)/(1<<20), sp.live, 100*g.s.opts.spaceSoftLimit)
}

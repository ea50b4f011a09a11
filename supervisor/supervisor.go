// Package supervisor is Reeve's supervisor: it finds step executions whose
// complete-by passed (or, queued, whose schedule-to-start deadline passed
// with no agent claiming them) and asks a scheduler to retry them,
// compensate their task, or fail it and alert an operator.
//
// Any number of supervisors may run; they campaign in an etcd election
// (concurrency.Election) and only the leader acts. Every action carries the
// leader's election key and revision, which the scheduler compares in the
// same etcd transaction as the change: a leader that lost its session (and
// so its key) cannot change anything, even if it does not know yet that it
// was deposed. Leadership itself is not mutual exclusion; the fence is.
//
// The leader holds no business knowledge: it decides from the step's retry
// policy and failure count only (taskstate.Decide).
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// Supervisor campaigns for leadership and, while leading, recovers expired
// executions.
type Supervisor struct {
	opts       options
	cli        *clientv3.Client
	store      *store.Store
	schedulers []reevev1.SupervisorServiceClient
	log        *slog.Logger
	leading    atomic.Bool
	tel        *instruments
	next       atomic.Uint32 // scheduler to try first
	// backoff holds the deadlines whose recovery failed, by
	// store.Expired.BackoffKey; used by the
	// leading goroutine only (and Tick's senders, under their mutex).
	backoff map[string]entryBackoff
	// slots is the leader's view of the deadlines slot keys hold (slots.go).
	slots *slotView
}

// New returns a supervisor that reads etcd through cli and acts through the
// schedulers (any of them will do; it moves on when one is unavailable).
func New(cli *clientv3.Client, schedulers []reevev1.SupervisorServiceClient, opts ...Option) (*Supervisor, error) {
	if len(schedulers) == 0 {
		return nil, errors.New("supervisor: at least one scheduler is required")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.tick <= 0 || o.batch <= 0 || o.sessionTTL < 1 {
		return nil, errors.New("supervisor: tick, batch and session TTL must be positive")
	}
	s := &Supervisor{
		opts:       o,
		cli:        cli,
		schedulers: schedulers,
		log:        o.log.With("supervisor_id", o.id),
		slots:      newSlotView(),
	}
	s.store = store.New(cli, store.WithPrefix(o.prefix), store.WithMeterProvider(o.meter), store.WithLogger(s.log))
	s.tel = newInstruments(s)
	return s, nil
}

// ID returns the supervisor's id.
func (s *Supervisor) ID() string { return s.opts.id }

// Leading reports whether this supervisor currently believes it leads. It is
// a hint for tests and status pages: only the fence makes actions safe.
func (s *Supervisor) Leading() bool { return s.leading.Load() }

// CheckLayout checks etcd's key layout version (store.AwaitLayout: it
// waits while etcd cannot be reached) and returns an error matching
// store.ErrLayoutTooNew when it is newer than this Reeve knows: the
// supervisor must not start. Run calls it first; a process calls it before
// it reports itself started, so that such a refusal ends it.
func (s *Supervisor) CheckLayout(ctx context.Context) error { return s.store.AwaitLayout(ctx) }

// Run checks etcd's layout version (CheckLayout), then campaigns and,
// while leading, ticks until ctx ends. When its etcd session is lost it
// stops acting at once and campaigns again. It returns nil when ctx ends,
// and at once the error of a layout it must not use.
func (s *Supervisor) Run(ctx context.Context) error {
	if err := s.CheckLayout(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(s.opts.sessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			s.log.Warn("etcd session", "err", err)
			s.sleep(ctx, time.Second)
			continue
		}
		el := concurrency.NewElection(sess, s.store.ElectionPrefix())
		// Campaign with the session's context, so that a campaign cannot
		// outlive its session.
		if err := el.Campaign(sess.Ctx(), s.opts.id); err != nil {
			_ = sess.Close()
			if ctx.Err() == nil {
				s.log.Warn("campaign", "err", err)
				s.sleep(ctx, time.Second)
			}
			continue
		}
		// Agent records deleted from here on are seen by the lost-agent
		// watch, even when it starts after Leading reports true.
		from, err := s.store.Revision(sess.Ctx())
		if err != nil {
			from = 0 // the watch reads the revision itself
		}
		s.leading.Store(true)
		s.log.Info("leading", "election_key", el.Key(), "revision", el.Rev())
		s.lead(ctx, sess, el, from)
		s.leading.Store(false)
		s.log.Info("stopped leading")
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = el.Resign(rctx)
		cancel()
		_ = sess.Close()
	}
	return nil
}

// lead recovers expired executions until ctx ends, the session is lost, or
// a call shows that this supervisor was deposed. It wakes at the earliest
// deadline in the index (kept current by a watch on the index), after
// backoffs of entries it failed on, and at least every tick as a safety net.
func (s *Supervisor) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, from int64) {
	fence := &reevev1.Fence{ElectionKey: el.Key(), Revision: el.Rev(), SupervisorId: s.opts.id}
	wctx, cancel := context.WithCancel(sess.Ctx())
	w := newWaker()
	done := make(chan struct{})
	lostDone := make(chan struct{})
	go func() {
		defer close(done)
		s.watchDeadlines(wctx, w)
	}()
	go func() {
		defer close(lostDone)
		s.watchLostAgents(wctx, fence, from)
	}()
	slotsDone := make(chan struct{})
	go func() {
		defer close(slotsDone)
		s.followSlots(wctx, w) // slots.go
	}()
	firesDone := make(chan struct{})
	go func() {
		defer close(firesDone)
		s.fireSchedules(wctx, fence, sess) // schedules.go
	}()
	defer func() {
		cancel()
		<-done
		<-lostDone
		<-slotsDone
		<-firesDone
	}()
	s.backoff = map[string]entryBackoff{}
	for {
		// Everything due by passAt is handled by the pass; the next wake is
		// the first deadline after it (which may be due already).
		passAt := s.opts.clock.Now()
		if !s.tick(sess.Ctx(), fence, passAt) {
			return
		}
		now := s.opts.clock.Now()
		next := now.Add(s.opts.tick)
		if at, ok, _, err := s.store.NextDeadline(sess.Ctx(), passAt, next); err == nil && ok && at.Before(next) {
			next = at
		}
		if at, ok := s.slots.next(passAt, next); ok {
			next = at
		}
		for _, b := range s.backoff {
			if b.next.Before(next) {
				next = b.next
			}
		}
		if at, ok := w.take(); ok && at.Before(next) {
			next = at
		}
		timer := s.opts.clock.NewTimer(next.Sub(now))
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-sess.Done():
				timer.Stop()
				return
			case <-timer.Chan():
				break wait
			case <-w.ch:
				if at, ok := w.take(); ok && at.Before(next) {
					next = at
					timer.Stop()
					timer = s.opts.clock.NewTimer(next.Sub(s.opts.clock.Now()))
				}
			}
		}
	}
}

// waker carries the earliest deadline added to the index since it was
// last taken, from the watch to the leader's loop.
type waker struct {
	ch      chan struct{}
	mu      sync.Mutex
	pending time.Time
	has     bool
}

func newWaker() *waker { return &waker{ch: make(chan struct{}, 1)} }

func (w *waker) add(at time.Time) {
	w.mu.Lock()
	if !w.has || at.Before(w.pending) {
		w.pending, w.has = at, true
	}
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (w *waker) take() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.pending, w.has
	w.has = false
	return at, ok
}

// watchDeadlines reports every deadline added to the index to w until ctx
// ends: it reads the head of the index, then watches from that revision,
// and reads again when the watch fails (after a compaction, at once).
func (s *Supervisor) watchDeadlines(ctx context.Context, w *waker) {
	for ctx.Err() == nil {
		// Only a deadline within the tick can wake the leader earlier
		// than it wakes anyway.
		now := s.opts.clock.Now()
		at, ok, rev, err := s.store.NextDeadline(ctx, now, now.Add(s.opts.tick))
		if err != nil {
			s.sleep(ctx, time.Second)
			continue
		}
		if ok {
			w.add(at)
		}
		err = s.store.WatchDeadlines(ctx, rev, w.add)
		if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) {
			s.log.Warn("watch deadline index", "err", err)
			s.sleep(ctx, time.Second)
		}
	}
}

// watchLostAgents acts on agents lost together with their scheduler (their
// agents/ record, or the disconnected/ key of a stream that had ended,
// vanished with the scheduler's lease): the beats of their executions were
// in that scheduler's memory only, so the leader asks a scheduler to move
// each heartbeat execution's complete-by to now plus its heartbeat timeout
// (RECOVERY_ACTION_AGENT_LOST); the deadline index does the rest. It
// watches from revision from (read before leadership was reported), or
// from the current revision after a failed watch. Agents lost before this
// leader led, or while its watch was down, are not seen: their executions
// wait for their complete-by.
func (s *Supervisor) watchLostAgents(ctx context.Context, fence *reevev1.Fence, from int64) {
	for ctx.Err() == nil {
		rev, err := from, error(nil)
		from = 0 // after a failed watch: from now on
		if rev == 0 {
			rev, err = s.store.Revision(ctx)
		}
		if err != nil {
			s.sleep(ctx, time.Second)
			continue
		}
		err = s.store.WatchLostAgents(ctx, rev, func(a store.LostAgent) { s.agentLost(ctx, fence, a) })
		if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) {
			s.log.Warn("watch agents", "err", err)
			s.sleep(ctx, time.Second)
		}
	}
}

func (s *Supervisor) agentLost(ctx context.Context, fence *reevev1.Fence, a store.LostAgent) {
	refs, err := s.store.HeartbeatExecutions(ctx, a.Namespace, a.AgentID)
	if err != nil {
		s.log.Warn("list a lost agent's heartbeat executions", "agent_id", a.AgentID, "err", err)
		return
	}
	if !a.Disconnected.IsZero() {
		refs = s.notAdopted(ctx, refs, a.Disconnected)
	}
	s.log.Info("agent lost with its scheduler", "agent_id", a.AgentID, "namespace", a.Namespace, "scheduler_id", a.SchedulerID, "heartbeat_executions", len(refs))
	for len(refs) > 0 {
		chunk := refs[:min(len(refs), decisionsPerCall)]
		refs = refs[len(chunk):]
		req := &reevev1.RecoverStepsRequest{Fence: fence}
		for _, r := range chunk {
			req.Decisions = append(req.Decisions, &reevev1.RecoveryDecision{Namespace: r.GetNamespace(), TaskId: r.GetTaskId(),
				Step: r.GetStep(), Attempt: r.GetAttempt(), Action: reevev1.RecoveryAction_RECOVERY_ACTION_AGENT_LOST, AgentId: a.AgentID})
		}
		err := s.call(ctx, func(ctx context.Context, c reevev1.SupervisorServiceClient) error {
			_, err := c.RecoverSteps(ctx, req)
			return err
		})
		if err != nil {
			// The executions keep their complete-by.
			s.log.Warn("report a lost agent's executions", "agent_id", a.AgentID, "err", err)
		}
	}
}

// notAdopted drops from refs the executions a reconnecting agent adopted
// after since (its stream to the dead scheduler ended then): the scheduler
// it reconnected to watches their heartbeats, and shortening their
// complete-by would take them from a live agent. A record that cannot be
// read is kept (acted on); one that is gone is dropped. An adoption that
// commits after this read is not seen (the execution's deadline is then
// shortened, and it is retried if the agent's result does not come first).
func (s *Supervisor) notAdopted(ctx context.Context, refs []*reevev1.StepRef, since time.Time) []*reevev1.StepRef {
	keep := make([]bool, len(refs))
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, r := range refs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := s.store.GetTask(ctx, r.GetNamespace(), r.GetTaskId())
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				keep[i] = true
			default:
				_, adopted := taskstate.AdoptedSince(v.Record.GetTask(), r.GetStep(), r.GetAttempt(), since)
				keep[i] = !adopted
			}
		})
	}
	wg.Wait()
	out := refs[:0:0]
	for i, r := range refs {
		if keep[i] {
			out = append(out, r)
		}
	}
	return out
}

// entryBackoff delays the next attempt at a deadline key whose recovery
// failed, so that the leader moves past it instead of retrying it at once.
type entryBackoff struct {
	next  time.Time
	fails int
}

const (
	minEntryBackoff = 200 * time.Millisecond
	maxEntryBackoff = 10 * time.Second
	// decisionsPerCall is the RecoverSteps batch size.
	decisionsPerCall = 256
	// callsInFlight bounds concurrent RecoverSteps calls of one pass.
	callsInFlight = 4
)

// Tick recovers every execution expired by now: it reads the expired part
// of the deadline index page by page (keys only), reads the records behind
// each page in batches, prunes keys no record implies any more, decides
// locally (taskstate.Decide) and sends the decisions to a scheduler in
// batches (RecoverSteps). Keys whose recovery failed are retried after a
// growing per-key backoff and are skipped meanwhile. It returns false if it
// found it is no longer the leader.
func (s *Supervisor) Tick(ctx context.Context, fence *reevev1.Fence) bool {
	return s.tick(ctx, fence, s.opts.clock.Now())
}

func (s *Supervisor) tick(ctx context.Context, fence *reevev1.Fence, now time.Time) bool {
	if s.backoff == nil {
		s.backoff = map[string]entryBackoff{}
	}
	fenceCmp := store.FenceCmp(fence.GetElectionKey(), fence.GetRevision())
	calls := &tickCalls{fence: fence, now: now, sem: make(chan struct{}, callsInFlight)}
	seen := map[string]bool{}
	complete := false
	after := ""
	for ctx.Err() == nil && !calls.deposed.Load() {
		page, err := s.store.ExpiredAfter(ctx, after, now, s.opts.batch)
		if err != nil {
			s.log.Warn("read deadline index", "err", err)
			break
		}
		if len(page) == 0 {
			complete = true
			break
		}
		after = page[len(page)-1].Key
		if !s.recover(ctx, calls, page, seen, fenceCmp) {
			break
		}
		if len(page) < s.opts.batch {
			complete = true
			break
		}
	}
	// The deadlines slot keys hold (slots.go): all of the expired ones,
	// in pages of the same size.
	if complete && ctx.Err() == nil && !calls.deposed.Load() {
		slots, err := s.expiredSlots(ctx, now)
		if err != nil {
			s.log.Warn("read slot deadlines", "err", err)
			complete = false
		}
		for len(slots) > 0 && ctx.Err() == nil && !calls.deposed.Load() {
			page := slots[:min(len(slots), s.opts.batch)]
			slots = slots[len(page):]
			if !s.recover(ctx, calls, page, seen, fenceCmp) {
				complete = false
				break
			}
		}
	}
	calls.wg.Wait()
	if complete {
		for k := range s.backoff {
			if !seen[k] {
				delete(s.backoff, k)
			}
		}
	}
	return !calls.deposed.Load()
}

// tickCalls are the RecoverSteps calls of one tick: sent under fence, at
// most callsInFlight at once (sem), waited for (wg) before the tick ends;
// mu guards s.backoff while they are in flight; deposed is set when a
// refusal showed that this supervisor is no longer the leader.
type tickCalls struct {
	fence   *reevev1.Fence
	now     time.Time // the tick's time, from which backoffs count
	sem     chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	deposed atomic.Bool
}

// pending is one decision waiting to be sent.
type pending struct {
	d      store.Expired
	rec    *store.Versioned
	st     *reevev1.Step
	action taskstate.Action
	delay  time.Duration
}

// send sends one batch of decisions on its own goroutine (at most
// callsInFlight at once) and records each outcome.
func (s *Supervisor) send(ctx context.Context, calls *tickCalls, batch []pending) {
	select {
	case calls.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	fence, now := calls.fence, calls.now
	calls.wg.Add(1)
	go func() {
		defer func() { <-calls.sem; calls.wg.Done() }()
		req := &reevev1.RecoverStepsRequest{Fence: fence, Decisions: make([]*reevev1.RecoveryDecision, len(batch))}
		spans := make([]trace.Span, len(batch))
		for i, p := range batch {
			dctx, span := s.tel.startDecision(ctx, p.rec.Record, p.st, p.d.Deadline, p.action, p.delay)
			spans[i] = span
			dec := &reevev1.RecoveryDecision{Namespace: p.d.Namespace, TaskId: p.d.TaskID, Step: p.d.Step, Attempt: p.d.Attempt,
				Action: p.action.RecoveryAction(), TraceContext: telemetry.Inject(dctx)}
			if p.action == taskstate.ActionRetry {
				dec.Delay = durationpb.New(p.delay)
			}
			req.Decisions[i] = dec
		}
		var resp *reevev1.RecoverStepsResponse
		err := s.call(ctx, func(ctx context.Context, c reevev1.SupervisorServiceClient) error {
			var err error
			resp, err = c.RecoverSteps(ctx, req)
			return err
		})
		if err == nil && len(resp.GetOutcomes()) != len(batch) {
			err = fmt.Errorf("scheduler answered %d outcomes for %d decisions", len(resp.GetOutcomes()), len(batch))
		}
		stale := false
		calls.mu.Lock()
		defer calls.mu.Unlock()
		for i, p := range batch {
			perr := err
			if perr == nil {
				if o := resp.GetOutcomes()[i]; !o.GetApplied() {
					perr = status.FromProto(o.GetStatus()).Err()
					if perr == nil {
						perr = status.Error(codes.Internal, "the scheduler refused a decision without a status")
					}
				}
			}
			endDecision(spans[i], perr)
			if perr == nil {
				delete(s.backoff, p.d.BackoffKey())
				s.tel.recoveries.Add(ctx, 1, metric.WithAttributes(telemetry.KeyAction.String(p.action.String())))
				continue
			}
			code := status.Code(perr)
			if code == codes.FailedPrecondition {
				stale = true
			}
			b := s.backoff[p.d.BackoffKey()]
			if transient(code) {
				// etcd or a scheduler unavailable, a lost race: nothing
				// wrong with the entry; try again soon, without growing.
				b.next = now.Add(minEntryBackoff)
			} else {
				b.fails++
				b.next = now.Add(min(minEntryBackoff<<min(b.fails-1, 10), maxEntryBackoff))
			}
			s.backoff[p.d.BackoffKey()] = b
			s.log.Info("recovery not applied", "task_id", p.d.TaskID, "step", p.d.Step, "attempt", p.d.Attempt,
				"action", p.action.String(), "failures", b.fails, "err", perr)
		}
		if err == nil && len(batch) > 0 {
			s.log.Debug("recovery batch applied", "decisions", len(batch))
		}
		if stale && !s.stillLeader(ctx, fence) {
			s.log.Warn("deposed: stopping")
			calls.deposed.Store(true)
		}
	}()
}

// transient reports whether a failed decision says nothing about its entry.
func transient(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// call tries the schedulers in turn, moving on from unavailable ones.
func (s *Supervisor) call(ctx context.Context, fn func(context.Context, reevev1.SupervisorServiceClient) error) error {
	var err error
	first := int(s.next.Load())
	for i := range s.schedulers {
		c := s.schedulers[(first+i)%len(s.schedulers)]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = fn(cctx, c)
		cancel()
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			return err
		}
		s.next.Store(uint32((first + i + 1) % len(s.schedulers)))
	}
	return err
}

// stillLeader checks the fence itself: the election key still exists with
// the revision it was won at.
func (s *Supervisor) stillLeader(ctx context.Context, fence *reevev1.Fence) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.cli.Get(cctx, fence.GetElectionKey())
	if err != nil {
		return true // cannot tell; the fence still protects every write
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == fence.GetRevision()
}

func (s *Supervisor) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-s.opts.clock.After(d):
	}
}

// recover handles one page of expired deadlines: it skips those backing
// off, reads the records behind the rest (pruning keys no record implies),
// decides each and sends the decisions. It returns false when the records
// could not be read (the pass ends there).
func (s *Supervisor) recover(ctx context.Context, calls *tickCalls, page []store.Expired, seen map[string]bool, fenceCmp clientv3.Cmp) bool {
	now := calls.now
	live := page[:0:0]
	calls.mu.Lock()
	for _, d := range page {
		seen[d.BackoffKey()] = true
		if b, ok := s.backoff[d.BackoffKey()]; ok && now.Before(b.next) {
			continue
		}
		live = append(live, d)
	}
	calls.mu.Unlock()
	recs, pruned, err := s.store.ExpiredRecords(ctx, live, fenceCmp)
	if err != nil {
		s.log.Warn("read expired tasks", "err", err)
		return false
	}
	if pruned > 0 {
		s.tel.pruned.Add(ctx, int64(pruned))
		s.log.Info("removed deadline keys no task implies", "count", pruned)
	}
	var batch []pending
	for i, d := range live {
		if recs[i] == nil {
			continue
		}
		t := recs[i].Record.GetTask()
		st := taskstate.FindStep(t, d.Step)
		action, delay := decide(t, d.Step, st) // timers.go
		s.tel.timerDecided(ctx, d.Step, action, now.Sub(d.CompleteBy))
		batch = append(batch, pending{d: d, rec: recs[i], st: st, action: action, delay: delay})
		if len(batch) == decisionsPerCall {
			s.send(ctx, calls, batch)
			batch = nil
		}
	}
	if len(batch) > 0 {
		s.send(ctx, calls, batch)
	}
	return true
}

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
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/metric"
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
		store:      store.New(cli, store.WithPrefix(o.prefix), store.WithMeterProvider(o.meter)),
		schedulers: schedulers,
		log:        o.log.With("supervisor_id", o.id),
	}
	s.tel = newInstruments(s)
	return s, nil
}

// ID returns the supervisor's id.
func (s *Supervisor) ID() string { return s.opts.id }

// Leading reports whether this supervisor currently believes it leads. It is
// a hint for tests and status pages: only the fence makes actions safe.
func (s *Supervisor) Leading() bool { return s.leading.Load() }

// Run campaigns and, while leading, ticks until ctx ends. When its etcd
// session is lost it stops acting at once and campaigns again. It returns
// nil when ctx ends.
func (s *Supervisor) Run(ctx context.Context) error {
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
		s.leading.Store(true)
		s.log.Info("leading", "election_key", el.Key(), "revision", el.Rev())
		s.lead(ctx, sess, el)
		s.leading.Store(false)
		s.log.Info("stopped leading")
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = el.Resign(rctx)
		cancel()
		_ = sess.Close()
	}
	return nil
}

// lead ticks until ctx ends, the session is lost, or a call shows that this
// supervisor was deposed.
func (s *Supervisor) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election) {
	fence := &reevev1.Fence{ElectionKey: el.Key(), Revision: el.Rev(), SupervisorId: s.opts.id}
	ticker := s.opts.clock.NewTicker(s.opts.tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case <-ticker.Chan():
		}
		if !s.Tick(sess.Ctx(), fence) {
			return
		}
	}
}

// Tick recovers the executions expired by now, at most one batch. It
// returns false if it found it is no longer the leader.
func (s *Supervisor) Tick(ctx context.Context, fence *reevev1.Fence) bool {
	expired, err := s.store.ExpiredDeadlines(ctx, s.opts.clock.Now(), s.opts.batch)
	if err != nil {
		s.log.Warn("read deadline index", "err", err)
		return true
	}
	for _, d := range expired {
		if err := s.recover(ctx, d, fence); err != nil {
			if status.Code(err) == codes.FailedPrecondition && !s.stillLeader(ctx, fence) {
				s.log.Warn("deposed: stopping", "err", err)
				return false
			}
			s.log.Info("recovery not applied", "task_id", d.TaskID, "step", d.Step, "attempt", d.Attempt, "err", err)
		}
	}
	return true
}

// recover decides what to do with one expired execution and asks a
// scheduler to do it.
func (s *Supervisor) recover(ctx context.Context, d store.Deadline, fence *reevev1.Fence) (err error) {
	v, err := s.store.GetTask(ctx, d.Namespace, d.TaskID)
	if err != nil {
		return err
	}
	t := v.Record.GetTask()
	st := taskstate.FindStep(t, d.Step)
	if _, due := taskstate.Deadline(st); !due || st.GetAttempt() != d.Attempt {
		return nil // moved on since the index was read
	}
	action, delay := taskstate.Decide(t, st)
	log := s.log.With("task_id", d.TaskID, "step", d.Step, "attempt", d.Attempt, "action", action.String())
	ctx, span := s.tel.startDecision(ctx, v.Record, st, d, action, delay)
	defer func() { endDecision(span, err) }()
	err = s.call(ctx, func(ctx context.Context, c reevev1.SupervisorServiceClient) error {
		var err error
		switch action {
		case taskstate.ActionRetry:
			_, err = c.RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: d.Namespace, TaskId: d.TaskID, Step: d.Step, Attempt: d.Attempt, Fence: fence, Delay: durationpb.New(delay)})
		case taskstate.ActionCompensate:
			_, err = c.CompensateTask(ctx, &reevev1.CompensateTaskRequest{Namespace: d.Namespace, TaskId: d.TaskID, Step: d.Step, Attempt: d.Attempt, Fence: fence})
		default:
			_, err = c.FailTask(ctx, &reevev1.FailTaskRequest{Namespace: d.Namespace, TaskId: d.TaskID, Step: d.Step, Attempt: d.Attempt, Fence: fence})
		}
		return err
	})
	if err == nil {
		s.tel.recoveries.Add(ctx, 1, metric.WithAttributes(telemetry.KeyAction.String(action.String())))
		log.InfoContext(ctx, "recovered expired step", "delay", delay)
	}
	return err
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

package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// The leader fires schedules (docs/schedules.md): it reads the due part of
// the schedule due index (store.DueSchedules: O(due), never every
// schedule) and asks a scheduler to fire them (FireSchedules) under its
// fence. It wakes at the earliest time in the index, which a watch on the
// index keeps current, and at least every tick. What makes a nominal time
// start once is not this loop but the task id derived from schedule and
// time: a deposed leader still firing, or a retried call, submits the
// same ids, and the scheduler returns the tasks that exist.

const (
	// schedulesPerCall is the FireSchedules batch size.
	schedulesPerCall = 256
	// fireCallsInFlight bounds concurrent FireSchedules calls of one pass:
	// with the scheduler's 64 firings at once per call, 512 schedules fire
	// at once, enough for their record writes to form large group commits
	// (docs/benchmarks.md, schedules).
	fireCallsInFlight = 8
	// fireBackoff is how long the loop waits after a pass in which some
	// schedule was not fired (a refusal, etcd, no scheduler), or which
	// fired nothing (the schedulers' clocks behind the leader's), before it
	// reads the index again.
	fireBackoff = 200 * time.Millisecond
)

// fireSchedules fires due schedules until ctx ends or a refusal shows the
// leader was deposed while its session lives on (its election key was
// deleted): it then closes the session, so that the leader stops leading
// and campaigns again, as a deposal found by a recovery does.
func (s *Supervisor) fireSchedules(ctx context.Context, fence *reevev1.Fence, sess *concurrency.Session) {
	w := newWaker()
	watchDone := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(watchDone)
		s.watchScheduleDue(wctx, w)
	}()
	defer func() {
		cancel()
		<-watchDone
	}()
	for ctx.Err() == nil {
		now := s.opts.clock.Now()
		fired, ok := s.firePass(ctx, fence, now)
		if !ok {
			_ = sess.Close()
			return
		}
		next := now.Add(s.opts.tick)
		if at, has, _, err := s.store.NextScheduleDue(ctx); err == nil && has && at.Before(next) {
			next = at
		}
		if at, has := w.take(); has && at.Before(next) {
			next = at
		}
		if soon := now.Add(fireBackoff); !fired && next.Before(soon) {
			next = soon
		}
		timer := s.opts.clock.NewTimer(next.Sub(s.opts.clock.Now()))
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.Chan():
				break wait
			case <-w.ch:
				if at, has := w.take(); has && at.Before(next) {
					next = at
					if soon := now.Add(fireBackoff); next.Before(soon) {
						next = soon
					}
					timer.Stop()
					timer = s.opts.clock.NewTimer(next.Sub(s.opts.clock.Now()))
				}
			}
		}
	}
}

// firePass fires every schedule due at now: it reads the due index page
// by page (each after the last key of the one before, so pages are read
// while the calls of earlier ones are in flight) and sends each page in
// FireSchedules calls of up to schedulesPerCall, at most
// fireCallsInFlight at once. fired: every due schedule was fired and
// something was due (true when nothing was); ok false: deposed.
func (s *Supervisor) firePass(ctx context.Context, fence *reevev1.Fence, now time.Time) (fired, ok bool) {
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		failed, deposed  bool
		started, skipped int32
		total            int
	)
	sem := make(chan struct{}, fireCallsInFlight)
	send := func(chunk []store.DueSchedule) {
		req := &reevev1.FireSchedulesRequest{Fence: fence}
		for _, d := range chunk {
			req.Schedules = append(req.Schedules, &reevev1.ScheduleRef{Namespace: d.Namespace, Name: d.Name})
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var resp *reevev1.FireSchedulesResponse
			err := s.call(ctx, func(ctx context.Context, c reevev1.SupervisorServiceClient) error {
				var err error
				resp, err = c.FireSchedules(ctx, req)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil || len(resp.GetOutcomes()) != len(chunk) {
				s.log.Warn("fire schedules", "schedules", len(chunk), "err", err)
				failed = true
				deposed = deposed || status.Code(err) == codes.FailedPrecondition
				return
			}
			for i, o := range resp.GetOutcomes() {
				started += o.GetStarted()
				skipped += o.GetSkipped() + o.GetBuffered()
				if o.GetApplied() {
					continue
				}
				failed = true
				switch codes.Code(o.GetStatus().GetCode()) {
				case codes.FailedPrecondition:
					deposed = true
				case codes.NotFound:
					// A due key without its schedule: repaired here.
					if err := s.store.PruneScheduleDue(ctx, chunk[i], store.FenceCmp(fence.GetElectionKey(), fence.GetRevision())); err != nil {
						s.log.Warn("prune schedule due key", "namespace", chunk[i].Namespace, "schedule", chunk[i].Name, "err", err)
					}
				default:
					s.log.Info("schedule not fired", "namespace", chunk[i].Namespace, "schedule", chunk[i].Name, "status", o.GetStatus().GetMessage())
				}
			}
		})
	}
	after := ""
	for ctx.Err() == nil {
		mu.Lock()
		stop := deposed
		mu.Unlock()
		if stop {
			break
		}
		page, err := s.store.DueSchedules(ctx, after, now, s.opts.batch)
		if err != nil {
			s.log.Warn("read schedule due index", "err", err)
			failed = true
			break
		}
		n := len(page)
		total += n
		for len(page) > 0 {
			chunk := page[:min(len(page), schedulesPerCall)]
			page = page[len(chunk):]
			after = chunk[len(chunk)-1].Key
			send(chunk)
		}
		if n < s.opts.batch {
			break // a short page: the due part is read
		}
	}
	wg.Wait()
	if deposed && !s.stillLeader(ctx, fence) {
		s.log.Warn("deposed: stopping firing schedules")
		return false, false
	}
	if total == 0 {
		return true, true
	}
	return !failed && started+skipped > 0, true
}

// watchScheduleDue reports every time added to the due index to w until
// ctx ends, as watchDeadlines does for the deadline index.
func (s *Supervisor) watchScheduleDue(ctx context.Context, w *waker) {
	for ctx.Err() == nil {
		at, ok, rev, err := s.store.NextScheduleDue(ctx)
		if err != nil {
			s.sleep(ctx, time.Second)
			continue
		}
		if ok {
			w.add(at)
		}
		err = s.store.WatchScheduleDue(ctx, rev, w.add)
		if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) {
			s.log.Warn("watch schedule due index", "err", err)
			s.sleep(ctx, time.Second)
		}
	}
}

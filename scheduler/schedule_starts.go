package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Starting the runs a firing here fired ahead (schedule_fire.go): the
// scheduler that created such a task starts it itself at its start time,
// one task write (startRun), as the supervisor's timer would, without the
// supervisor's pass over the deadline index or a RecoverSteps call: at a
// time 10,000 schedules share, the start is what is left, and this is its
// cheapest form (docs/benchmarks.md). The task's @start key is
// start_backstop later than its start time (Task.start_backstop), so the
// leader's timer starts only a task this scheduler did not: it stopped, or
// its write failed. Both starting one task is harmless (taskstate.StartTask
// refuses a task that no longer waits to start), only wasted.

const (
	// StartBackstop is how much later than its start time the supervisor's
	// timer starts a run a scheduler was to start itself (Task.start_backstop).
	StartBackstop = 2 * time.Second
	// maxSelfStarts bounds the runs waiting here to be started; past it a
	// run is submitted for the supervisor's timer to start (at its time).
	maxSelfStarts = 100_000
	// startsInFlight bounds the start writes sent at once.
	startsInFlight = 256
)

// selfStart is one run to start: task (ns, id) at at.
type selfStart struct {
	ns, id string
	at     time.Time
}

// startHeap orders runs by start time.
type startHeap []selfStart

func (h startHeap) Len() int           { return len(h) }
func (h startHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h startHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *startHeap) Push(x any)        { *h = append(*h, x.(selfStart)) }
func (h *startHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// selfStarts is the runs this scheduler starts itself, in memory.
type selfStarts struct {
	clock clockwork.Clock
	start func(ctx context.Context, s selfStart) // startRun
	wake  chan struct{}

	mu       sync.Mutex
	due      startHeap
	reserved int // submissions under way that will add (reserve)
}

func newSelfStarts(clock clockwork.Clock, start func(context.Context, selfStart)) *selfStarts {
	return &selfStarts{clock: clock, start: start, wake: make(chan struct{}, 1)}
}

// reserve takes room for one run to be added (add) or released (release);
// false when this scheduler holds maxSelfStarts already.
func (s *selfStarts) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.due)+s.reserved >= maxSelfStarts {
		return false
	}
	s.reserved++
	return true
}

// release gives back a reservation not used (the task was not created here).
func (s *selfStarts) release() {
	s.mu.Lock()
	s.reserved--
	s.mu.Unlock()
}

// add uses a reservation for task (ns, id), to be started at at.
func (s *selfStarts) add(ns, id string, at time.Time) {
	s.mu.Lock()
	s.reserved--
	heap.Push(&s.due, selfStart{ns: ns, id: id, at: at})
	head := s.due[0].ns == ns && s.due[0].id == id
	s.mu.Unlock()
	if head {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// run starts each run at its time until ctx ends; what is left then is the
// supervisor's (its backstop).
func (s *selfStarts) run(ctx context.Context) {
	sem := make(chan struct{}, startsInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s.mu.Lock()
		now := s.clock.Now()
		var ready []selfStart
		for len(s.due) > 0 && !s.due[0].at.After(now) {
			ready = append(ready, heap.Pop(&s.due).(selfStart))
		}
		wait := time.Duration(-1)
		if len(s.due) > 0 {
			wait = s.due[0].at.Sub(now)
		}
		s.mu.Unlock()
		for _, r := range ready {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s.start(ctx, r)
			})
		}
		if len(ready) > 0 {
			continue // more may have come due meanwhile
		}
		var (
			timer clockwork.Timer
			fired <-chan time.Time
		)
		if wait >= 0 {
			timer = s.clock.NewTimer(wait)
			fired = timer.Chan()
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// startRun starts a schedule's run fired ahead, at its start time: the
// write the supervisor's timer makes (timerRecovery's start), claiming its
// first step for an agent here with room. A task that no longer waits to
// start (started by the backstop, canceled by a pause, ended) is left as
// it is; a failed write is left to the backstop.
func (e *engine) startRun(ctx context.Context, r selfStart) {
	w, err := e.update(ctx, taskWrite{ns: r.ns, id: r.id, claim: "start of a schedule's run",
		change: func(t *reevev1.Task, now time.Time, claim *writeClaim) (effects, error) {
			return effects{action: taskstate.ActionStart.String()}, claim.run(t, "", now, func() error {
				return taskstate.StartTask(t, "scheduler", now)
			})
		}})
	switch {
	case err == nil:
		e.timerWritten(ctx, w.action, w.after, taskstate.StartMark) // its lateness
	case errors.Is(err, taskstate.ErrStale), errors.Is(err, taskstate.ErrTerminal), store.IsNotFound(err), ctx.Err() != nil:
	default:
		e.log.WarnContext(ctx, "start a schedule's run: the supervisor's timer starts it instead", "namespace", r.ns, "task_id", r.id, "err", err)
	}
}

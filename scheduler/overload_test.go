package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// pool is a slowed agent pool the test drives: one agent with room for
// `slots` steps that holds each step until the test finishes it, on a
// scheduler whose clock only the test moves. Every round, the test submits
// some tasks, moves the clock one tick, finishes up to `slots` held steps
// and waits for the steps that took their place: the pool serves `slots`
// steps per tick whatever the machine's speed, so every wait is measured in
// ticks of the fake clock.
type pool struct {
	t     *testing.T
	c     reevev1.SchedulerServiceClient
	clock *clockwork.FakeClock
	agent *testenv.RawAgent
	slots int
	tick  time.Duration

	round      int
	submitted  map[string]time.Time // admitted task → when (fake clock)
	queued     []string             // admitted, not yet dispatched, oldest first
	held       []*reevev1.StepRef   // dispatched, not finished
	done       int
	refused    int
	maxWait    time.Duration // longest wait of an admitted task, submission to dispatch
	lastRetry  time.Duration // RetryInfo delay of the last refusal
	firstRetry time.Duration // and of the first
}

const overloadTarget, overloadInterval = time.Second, time.Second

func newPool(t *testing.T, slots int, tick time.Duration) *pool {
	env := testenv.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	s := env.StartScheduler("", scheduler.WithClock(clock), scheduler.WithOverload(overloadTarget, overloadInterval), scheduler.WithOverloadAgentQueues(true))
	return &pool{t: t, c: s.Client(t), clock: clock, slots: slots, tick: tick, submitted: map[string]time.Time{},
		agent: testenv.ConnectRaw(t, s.Addr, register("pool", int32(slots), "work"))}
}

func (p *pool) request(id string) *reevev1.SubmitTaskRequest {
	// A step timeout far beyond the fake time the test runs: no attempt
	// expires.
	return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(&reevev1.StepSpec{Name: "s", Type: "work", Timeout: durationpb.New(24 * time.Hour)})}
}

// submit offers n new tasks; a refusal must be RESOURCE_EXHAUSTED with
// reason OVERLOADED and a RetryInfo delay of at least one interval.
func (p *pool) submit(n int) {
	p.t.Helper()
	for i := range n {
		id := fmt.Sprintf("t-%03d-%d", p.round, i)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := p.c.SubmitTask(ctx, p.request(id))
		cancel()
		if err != nil {
			p.refusal(id, err)
			continue
		}
		p.submitted[id] = p.clock.Now()
		p.queued = append(p.queued, id)
	}
}

func (p *pool) refusal(id string, err error) {
	p.t.Helper()
	st := status.Convert(err)
	reason, retry := reasonOf(st), retryOf(st)
	if st.Code() != codes.ResourceExhausted || reason != scheduler.ReasonOverloaded || retry < overloadInterval {
		p.t.Fatalf("submit %s: %v (reason %q, retry after %v), want RESOURCE_EXHAUSTED, OVERLOADED, a RetryInfo of at least %v", id, err, reason, retry, overloadInterval)
	}
	p.refused++
	p.lastRetry = retry
	if p.firstRetry == 0 {
		p.firstRetry = retry
	}
}

// serve moves the clock one tick, finishes up to slots held steps and
// waits for the queued steps that take their place (the oldest).
func (p *pool) serve() {
	p.t.Helper()
	p.round++
	p.clock.Advance(p.tick)
	for range min(p.slots, len(p.held)) {
		if ack := p.agent.Succeed(p.held[0], nil); !ack.GetAccepted() {
			p.t.Fatalf("result for %v refused: %v", p.held[0], ack.GetStatus())
		}
		p.held = p.held[1:]
		p.done++
	}
	p.dispatch()
}

// dispatch takes the assignments the free slots get.
func (p *pool) dispatch() {
	p.t.Helper()
	for len(p.held) < p.slots && len(p.queued) > 0 {
		a := p.agent.NextAssignment(wait)
		id := a.GetRef().GetTaskId()
		// Claims start oldest first, and those in flight together may
		// finish in any order.
		i := slices.Index(p.queued, id)
		if i < 0 || i >= p.slots {
			p.t.Fatalf("dispatched %s, want one of the oldest queued tasks %v", id, p.queued[:min(p.slots, len(p.queued))])
		}
		p.queued = slices.Delete(p.queued, i, i+1)
		p.held = append(p.held, a.GetRef())
		p.maxWait = max(p.maxWait, p.clock.Since(p.submitted[id]))
	}
}

// drain serves until every admitted task finished.
func (p *pool) drain() {
	p.t.Helper()
	for i := 0; len(p.held) > 0 || len(p.queued) > 0; i++ {
		if i > 1000 {
			p.t.Fatalf("not drained: %d held, %d queued", len(p.held), len(p.queued))
		}
		p.serve()
	}
	for id := range p.submitted {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := p.c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		cancel()
		if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			p.t.Fatalf("admitted task %s: %v %v, want SUCCEEDED", id, resp.GetTask().GetState(), err)
		}
	}
}

// Past capacity, the scheduler sheds: offered 3 tasks per tick against a
// pool that finishes 2, it starts refusing new tasks (RESOURCE_EXHAUSTED,
// OVERLOADED, RetryInfo) once the queue's wait stayed over the target, the
// tasks it admits wait a bounded time however long the overload lasts,
// every admitted task completes, and a retried submission of a task it
// admitted still gets that task while it sheds.
func TestOverloadShedsPastCapacity(t *testing.T) {
	const slots, tick = 2, 250 * time.Millisecond // 8 steps per second of the fake clock
	p := newPool(t, slots, tick)
	firstRefusal := -1
	for p.round < 80 { // 20 s of fake time: 20 intervals
		p.submit(3)
		if p.refused > 0 && firstRefusal < 0 {
			firstRefusal = p.round
			p.resubmitWhileShedding()
		}
		p.dispatch()
		p.serve()
	}
	if firstRefusal < 0 {
		t.Fatalf("offered 1.5× capacity for %d ticks: nothing refused, the longest wait was %v", p.round, p.maxWait)
	}
	// Without shedding the wait would grow by a tick every two ticks
	// (one task per tick more than the pool serves): 80 ticks would end
	// with a 10 s wait. The controller lets the wait reach the target and
	// hold it for two intervals before it cuts; each cut takes at least 5%
	// off what is admitted, so by then the queue stops growing within a
	// few intervals more.
	if bound := overloadTarget + 3*overloadInterval; p.maxWait > bound {
		t.Errorf("an admitted task waited %v for the pool, want at most %v (target %v, interval %v)", p.maxWait, bound, overloadTarget, overloadInterval)
	}
	// The retry delay is the measured wait plus one interval: shedding
	// starts on a wait over the target, and no wait was over maxWait.
	if p.firstRetry <= overloadTarget+overloadInterval || p.lastRetry > overloadInterval+p.maxWait {
		t.Errorf("RetryInfo %v first, %v last; want over the target plus one interval (%v) at first, at most the longest wait plus one interval (%v)",
			p.firstRetry, p.lastRetry, overloadTarget+overloadInterval, overloadInterval+p.maxWait)
	}
	admitted := len(p.submitted)
	t.Logf("offered %d, admitted %d, refused %d (first at tick %d), longest wait %v", admitted+p.refused, admitted, p.refused, firstRefusal, p.maxWait)
	p.drain()
	if p.done != admitted {
		t.Fatalf("%d tasks finished, %d admitted", p.done, admitted)
	}
}

// resubmitWhileShedding sends the latest admitted task's submission again,
// more times than the shed share lets through: each gets the task back.
func (p *pool) resubmitWhileShedding() {
	p.t.Helper()
	id := p.queued[len(p.queued)-1]
	for range 25 { // the first cut leaves at most 95%: at least one of 20 is shed
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := p.c.SubmitTask(ctx, p.request(id))
		cancel()
		if err != nil || resp.GetCreated() || resp.GetTask().GetId() != id {
			p.t.Fatalf("resubmission of admitted task %s while shedding: %v (created %v), want the task", id, err, resp.GetCreated())
		}
	}
}

// Below capacity nothing is refused, bursts included: offered 1 or 2 tasks
// per tick (after a burst of 6) against a pool that finishes 2, every
// submission is admitted.
func TestOverloadAdmitsEverythingBelowCapacity(t *testing.T) {
	const slots, tick = 2, 250 * time.Millisecond
	p := newPool(t, slots, tick)
	p.submit(6)
	p.dispatch()
	for p.round < 80 {
		p.serve()
		p.submit(1 + p.round%2)
		p.dispatch()
	}
	if p.refused > 0 {
		t.Fatalf("below capacity, %d of %d submissions refused (last retry %v); longest wait %v", p.refused, p.refused+len(p.submitted), p.lastRetry, p.maxWait)
	}
	p.drain()
	if p.done != len(p.submitted) {
		t.Fatalf("%d tasks finished, %d admitted", p.done, len(p.submitted))
	}
}

// With --overload-cpu-target, a scheduler whose goroutines keep waiting for
// a CPU refuses part of the new tasks through SubmitTask: RESOURCE_EXHAUSTED,
// OVERLOADED, a RetryInfo, and a message naming the CPU; it admits every
// task while the wait is under the target, and again once it falls back.
// The run-queue measure is a stand-in the test sets, the clock a fake one.
func TestOverloadCPUShedsSubmissions(t *testing.T) {
	env := testenv.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	var runQueue atomic.Int64 // the wait the next interval measures, in ns
	s := env.StartScheduler("", scheduler.WithClock(clock), scheduler.WithOverload(overloadTarget, overloadInterval),
		scheduler.WithOverloadCPU(time.Millisecond),
		scheduler.WithRunQueueWaitForTest(func() time.Duration { return time.Duration(runQueue.Load()) }))
	c := s.Client(t)
	n := 0
	// offer submits k tasks after one more interval and reports the refusals.
	offer := func(k int) (refused []error) {
		t.Helper()
		clock.Advance(overloadInterval)
		for range k {
			n++
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("cpu-%d", n),
				Workflow: inline(&reevev1.StepSpec{Name: "s", Type: "work", Timeout: durationpb.New(time.Hour)})})
			cancel()
			if err != nil {
				refused = append(refused, err)
			}
		}
		return refused
	}

	for range 5 {
		if r := offer(10); len(r) > 0 {
			t.Fatalf("run queue idle: %d of 10 refused: %v", len(r), r[0])
		}
	}
	runQueue.Store(int64(4 * time.Millisecond))
	offer(1)
	offer(1) // two intervals over the target: shedding starts
	r := offer(20)
	if len(r) == 0 || len(r) == 20 {
		t.Fatalf("after two intervals at 4× the CPU target: %d of 20 refused, want part of them", len(r))
	}
	st := status.Convert(r[0])
	reason, retry := reasonOf(st), retryOf(st)
	if st.Code() != codes.ResourceExhausted || reason != scheduler.ReasonOverloaded || retry != 4*time.Millisecond+overloadInterval ||
		!strings.Contains(st.Message(), "waits for a CPU") {
		t.Fatalf("refusal %v (reason %q, retry after %v), want RESOURCE_EXHAUSTED, OVERLOADED, retry after the wait plus one interval, naming the CPU", r[0], reason, retry)
	}

	runQueue.Store(0)
	for i := 0; len(offer(10)) > 0; i++ {
		if i == 100 {
			t.Fatal("still refusing after 100 calm intervals")
		}
	}
}

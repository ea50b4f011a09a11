package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// Overload shedding (WithOverload). Past capacity, admitted work waits
// longer and longer; SubmitTask then refuses part of the new tasks so that
// what it admits waits a bounded time. The scheduler measures the wait where
// it builds, at no etcd cost:
//
//   - dispatch: each step this scheduler hands to an agent waited from the
//     moment it was due (its ready time in the record, or the end of its
//     backoff) until its claim was committed. That covers the new task's
//     wait for etcd (the create's group-commit queue), the ready queue while
//     every agent of its type is busy, and the claim's own wait for etcd.
//     Kept per (namespace, step type): a type whose agents are saturated
//     sheds the workflows that use it, not every submission.
//   - write: each task this scheduler creates waited from its submission's
//     create call to the commit (store group commit, batch.go; creates the
//     store refused at once are not samples). A scheduler with no agents
//     connected still sees an etcd that does not keep up.
//   - CPU, only with WithOverloadCPU: how long this process's goroutines
//     stayed runnable before a CPU ran them (the Go runtime's run queue,
//     runqueue.go), the 90th percentile of each interval. Every step of a
//     task's path (the call, the commit, the dispatch, the result) is a few
//     such waits, so when the process's own CPU is what is short, they grow
//     together; the write controller sees only the part spent waiting for
//     etcd.
//
// Each of these is a controller in the manner of CoDel (Nichols and
// Jacobson, "Controlling Queue Delay"): the least delay seen during an
// interval tells a standing queue (the least is over the target: every item
// of the interval waited) from a burst that drains by itself (some item got
// through quickly). Shedding starts once the least delay stayed over the
// target for two intervals in a row (a single late dispatch in a quiet
// system is not a queue). While it persists, an interval whose least delay
// is over the target multiplies the fraction of submissions admitted by
// target/delay, between ×0.5 and ×0.95: the longer the queue, the deeper
// the cut. A cut shows in the measured delays only once the work admitted
// after it reaches an agent, one queue delay later (the delays measured
// until then are of work admitted before it): the next cut waits that long,
// at least one interval and at most two (a long queue must still be cut
// fast enough to stop growing; the cuts made during its drain are given
// back as below). Every interval whose least delay is under the target, or
// that saw nothing, gives back an eighth of what is refused (at least 2%):
// a queue gone means the cuts went too deep, and the fraction that holds
// the queue at the target is found again within a few intervals. Below
// capacity no interval has a standing queue, so nothing is refused. The
// fraction is applied deterministically (every 1/(1-admit)-th submission is
// refused, not a coin toss), before any etcd work: the decision costs
// microseconds.

// The defaults of WithOverload.
const (
	DefaultOverloadTarget   = 50 * time.Millisecond
	DefaultOverloadInterval = 100 * time.Millisecond
)

// The control law's constants (see above).
const (
	overloadCutMin  = 0.5  // strongest cut of the admitted fraction per interval
	overloadCutMax  = 0.95 // weakest cut, for a delay just over the target
	overloadRecover = 8    // a calm interval gives back 1/overloadRecover of the refused fraction
	overloadStep    = 0.02 // and at least this much
	overloadHoldMax = 2    // intervals a cut waits for the last one's effect, at most
	// maxOverloadKeys bounds the per-type controllers; past it, those
	// admitting everything are dropped.
	maxOverloadKeys = 4096
	// maxOverloadRetry bounds the retry delay sent with a refusal.
	maxOverloadRetry = 10 * time.Second
)

// overload is a scheduler's shedding state; safe for concurrent use. A nil
// *overload (shedding off) admits everything.
type overload struct {
	target, interval time.Duration
	agentQueues      bool // the per-type controllers act (WithOverloadAgentQueues)
	clock            clockwork.Clock
	log              *slog.Logger
	refusedCount     metric.Int64Counter

	mu      sync.Mutex
	write   *delayControl
	cpu     *delayControl        // nil without WithOverloadCPU
	cpuWait func() time.Duration // the run-queue wait since its last call, -1: none
	types   map[queueKey]*delayControl
	nsAttrs map[string]metric.AddOption // the refusal counter's attributes per namespace, built once
}

// newOverload returns the shedding state of o, or nil when it is off.
func newOverload(o options, log *slog.Logger, meter metric.Meter) *overload {
	if o.overloadTarget <= 0 {
		return nil
	}
	ov := &overload{target: o.overloadTarget, interval: o.overloadInterval, agentQueues: o.overloadAgents, clock: o.clock, log: log,
		types: map[queueKey]*delayControl{}, nsAttrs: map[string]metric.AddOption{}}
	ov.write = newControl(o.clock.Now(), ov.target)
	if o.overloadCPU > 0 {
		ov.cpu = newControl(o.clock.Now(), o.overloadCPU)
		ov.cpuWait = o.runQueueWait
		if ov.cpuWait == nil {
			ov.cpuWait = newRunQueue().wait
		}
	}
	ov.refusedCount, _ = meter.Int64Counter("reeve.tasks.shed",
		metric.WithDescription("Submissions refused because admitted work waited longer than the overload target (RESOURCE_EXHAUSTED, OVERLOADED)"))
	return ov
}

// delayControl is one controller: the least delay of the current interval
// and the fraction of submissions admitted. Guarded by overload.mu.
type delayControl struct {
	target time.Duration // the delay over which it sheds
	start  time.Time     // the current interval's start
	least  time.Duration // the least delay seen in it; -1: none yet
	last   time.Duration // the least delay of the last interval that saw any
	above  int           // intervals in a row whose least delay was over the target
	hold   time.Time     // no cut before: the last cut's effect is not measurable yet
	admit  float64       // fraction of submissions admitted, in [0, 1]
	owed   float64       // refusals owed: each submission adds 1-admit, each refusal pays 1
}

func newControl(now time.Time, target time.Duration) *delayControl {
	return &delayControl{target: target, start: now, least: -1, admit: 1}
}

// roll closes the intervals that ended by now. It reports whether the
// controller started or stopped shedding.
func (ov *overload) roll(c *delayControl, now time.Time) (started, stopped bool) {
	ended := now.Sub(c.start) / ov.interval
	if ended <= 0 {
		return false, false
	}
	was := c.admit < 1
	if c.least > c.target {
		c.above++
		if (was || c.above >= 2) && !now.Before(c.hold) {
			c.admit *= min(overloadCutMax, max(overloadCutMin, float64(c.target)/float64(c.least)))
			c.hold = now.Add(min(max(ov.interval, c.least), overloadHoldMax*ov.interval))
		}
	} else {
		c.above = 0
		c.admit = recovered(c.admit)
	}
	// The later intervals saw nothing: calm.
	if ended > 1 {
		c.above = 0
	}
	for i := time.Duration(1); i < ended && c.admit < 1; i++ {
		c.admit = recovered(c.admit)
	}
	if c.least >= 0 {
		c.last = c.least
	}
	if c.admit == 1 {
		c.owed = 0
	}
	c.start = c.start.Add(ended * ov.interval)
	c.least = -1
	is := c.admit < 1
	return is && !was, was && !is
}

// recovered is the fraction admitted after a calm interval.
func recovered(admit float64) float64 {
	admit += max(overloadStep, (1-admit)/overloadRecover)
	if admit > 0.999 { // whole again (the sums are inexact)
		return 1
	}
	return admit
}

// observe records a delay d measured at now by c. what names c's queue,
// for the log.
func (ov *overload) observe(c *delayControl, what func() string, d time.Duration, now time.Time) {
	ov.rollLogged(c, now, what)
	if c.least < 0 || d < c.least {
		c.least = max(d, 0)
	}
}

// rollLogged is roll, logging when c starts or stops shedding.
func (ov *overload) rollLogged(c *delayControl, now time.Time, what func() string) {
	started, stopped := ov.roll(c, now)
	if !started && !stopped {
		return
	}
	switch {
	case started:
		ov.log.Warn("overloaded: admitted work waits longer than the target; refusing part of the new tasks",
			"queue", what(), "least_delay", c.last, "target", c.target, "admitted_fraction", c.admit)
	default:
		ov.log.Info("no longer overloaded: admitting every new task", "queue", what(), "target", c.target)
	}
}

// dispatched records that a step of type typ in namespace ns, due at due,
// was claimed for an agent at now.
func (ov *overload) dispatched(ns, typ string, due, now time.Time) {
	if ov == nil || !ov.agentQueues {
		return
	}
	k := queueKey{ns, typ}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	c := ov.types[k]
	if c == nil {
		if len(ov.types) >= maxOverloadKeys {
			for key, old := range ov.types {
				if ov.roll(old, now); old.admit == 1 {
					delete(ov.types, key)
				}
			}
		}
		c = newControl(now, ov.target)
		ov.types[k] = c
	}
	ov.observe(c, dispatchQueue(ns, typ), now.Sub(due), now)
}

// wrote records that a task creation waited d for etcd.
func (ov *overload) wrote(d time.Duration) {
	if ov == nil {
		return
	}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	ov.observe(ov.write, creationQueue, d, ov.clock.Now())
}

// rollCPU closes the CPU controller's intervals that ended by now, with
// the run-queue wait measured over them. Called with ov.mu held.
func (ov *overload) rollCPU(now time.Time) {
	c := ov.cpu
	if c == nil || now.Sub(c.start) < ov.interval {
		return
	}
	if d := ov.cpuWait(); d >= 0 {
		c.least = d
	}
	ov.rollLogged(c, now, cpuQueue)
}

// The names of the queues in the log.
func creationQueue() string { return "task creation" }

func cpuQueue() string { return "CPU (run queue)" }

func dispatchQueue(ns, typ string) func() string {
	return func() string { return "dispatch of " + ns + "/" + typ }
}

// allow admits, or refuses with RESOURCE_EXHAUSTED (OVERLOADED, and a
// RetryInfo of the measured delay plus one interval), a new task of
// namespace ns running wf: the most restrictive of the write controller and
// the controllers of wf's step types (compensations included) decides.
func (ov *overload) allow(ns string, wf *reevev1.Workflow) error {
	if ov == nil {
		return nil
	}
	now := ov.clock.Now()
	ov.mu.Lock()
	worst, worstType := ov.write, ""
	ov.rollLogged(worst, now, creationQueue)
	if ov.rollCPU(now); ov.cpu != nil && ov.cpu.admit < worst.admit {
		worst = ov.cpu
	}
	for _, sp := range wf.GetSteps() {
		for _, typ := range [2]string{sp.GetType(), sp.GetCompensation().GetType()} {
			c := ov.types[queueKey{ns, typ}]
			if typ == "" || c == nil {
				continue
			}
			ov.rollLogged(c, now, dispatchQueue(ns, typ))
			if c.admit < worst.admit {
				worst, worstType = c, typ
			}
		}
	}
	if worst.admit >= 1 {
		ov.mu.Unlock()
		return nil
	}
	worst.owed += 1 - worst.admit
	if worst.owed < 1 {
		ov.mu.Unlock()
		return nil
	}
	worst.owed--
	delay, admit, target := worst.last, worst.admit, worst.target
	attrs := ov.nsAttrs[ns]
	if attrs == nil {
		if len(ov.nsAttrs) >= maxOverloadKeys {
			clear(ov.nsAttrs)
		}
		attrs = metric.WithAttributes(telemetry.KeyNamespace.String(ns))
		ov.nsAttrs[ns] = attrs
	}
	ov.mu.Unlock()
	ov.refusedCount.Add(context.Background(), 1, attrs)
	retry := min(maxOverloadRetry, delay+ov.interval).Round(time.Millisecond)
	what := "new tasks wait for etcd"
	switch {
	case worstType != "":
		what = fmt.Sprintf("steps of type %q wait for an agent", worstType)
	case worst == ov.cpu:
		what = "the scheduler's work waits for a CPU"
	}
	return &refusal{code: codes.ResourceExhausted, reason: ReasonOverloaded, retry: retry,
		msg: fmt.Sprintf("overloaded: %s %s (target %s), so %.0f%% of new tasks are refused for now; retry after %s",
			what, roundWait(delay), target, 100*(1-admit), retry)}
}

// roundWait rounds a wait for a message: to the millisecond, or to 10µs
// under one.
func roundWait(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

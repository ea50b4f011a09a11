package scheduler

import (
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/metric/noop"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The control law, interval by interval: one late dispatch in a quiet
// system sheds nothing; a wait over the target for two intervals in a row
// starts shedding with a cut of target/wait; calm intervals give the
// refused share back until everything is admitted again; a type's
// controller decides only for the workflows that use the type.
func TestOverloadControlLaw(t *testing.T) {
	const target, interval = 50 * time.Millisecond, 100 * time.Millisecond
	clock := clockwork.NewFakeClock()
	o := defaultOptions()
	o.clock, o.overloadTarget, o.overloadInterval, o.overloadAgents = clock, target, interval, true
	ov := newOverload(o, slog.New(slog.DiscardHandler), noop.NewMeterProvider().Meter("test"))
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "slow"}}}
	other := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "fast"}}}
	admitted := func(w *reevev1.Workflow, n int) int {
		ok := 0
		for range n {
			if ov.allow("ns", w) == nil {
				ok++
			}
		}
		return ok
	}
	// A step of type slow dispatched now after waiting d.
	dispatch := func(d time.Duration) { ov.dispatched("ns", "slow", clock.Now().Add(-d), clock.Now()) }
	admit := func() float64 { ov.mu.Lock(); defer ov.mu.Unlock(); return ov.types[queueKey{"ns", "slow"}].admit }

	dispatch(time.Second) // one late dispatch
	clock.Advance(interval)
	dispatch(time.Millisecond)
	clock.Advance(interval)
	if n := admitted(wf, 100); n != 100 {
		t.Fatalf("after one late dispatch: %d of 100 admitted, want all", n)
	}

	for range 2 { // a standing queue: every dispatch of two intervals waited 100ms
		dispatch(100 * time.Millisecond)
		clock.Advance(interval)
	}
	if n := admitted(wf, 100); n != 50 {
		t.Fatalf("after two intervals at twice the target: %d of 100 admitted, want 50 (a cut of target/wait)", n)
	}
	if n := admitted(other, 100); n != 100 {
		t.Fatalf("a workflow of another type: %d of 100 admitted, want all", n)
	}
	err := ov.allow("ns", wf)
	for err == nil {
		err = ov.allow("ns", wf)
	}
	if r, ok := err.(*refusal); !ok || r.reason != ReasonOverloaded || r.retry != 100*time.Millisecond+interval {
		t.Fatalf("refusal %#v, want OVERLOADED with a retry of the measured wait plus one interval", err)
	}

	prev := admit()
	for i := 0; admit() < 1; i++ { // calm: the queue is gone
		if i > 200 {
			t.Fatalf("still shedding after %d calm intervals: %v admitted", i, admit())
		}
		dispatch(0)
		clock.Advance(interval)
		ov.allow("ns", wf)
		if a := admit(); a <= prev && a < 1 {
			t.Fatalf("a calm interval took the admitted fraction from %v to %v", prev, a)
		}
		prev = admit()
	}
	if n := admitted(wf, 100); n != 100 {
		t.Fatalf("recovered: %d of 100 admitted, want all", n)
	}
}

// By default (WithOverloadAgentQueues off) steps waiting for their agents
// shed nothing: a backlog for a small pool queues.
func TestOverloadIgnoresAgentQueuesByDefault(t *testing.T) {
	const target, interval = 50 * time.Millisecond, 100 * time.Millisecond
	clock := clockwork.NewFakeClock()
	o := defaultOptions()
	o.clock, o.overloadTarget, o.overloadInterval = clock, target, interval
	ov := newOverload(o, slog.New(slog.DiscardHandler), noop.NewMeterProvider().Meter("test"))
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "slow"}}}
	for range 10 {
		ov.dispatched("ns", "slow", clock.Now().Add(-time.Minute), clock.Now())
		clock.Advance(interval)
	}
	for i := range 100 {
		if err := ov.allow("ns", wf); err != nil {
			t.Fatalf("submission %d refused after steps waited a minute for their agents: %v", i, err)
		}
	}
}

// With WithOverloadCPU, a run-queue wait over the CPU target for two
// intervals in a row sheds every workflow, with a message that names the
// CPU; waits under it shed nothing; calm intervals admit everything again.
// Without it, no run-queue wait is read and nothing is shed for it.
func TestOverloadCPUControlLaw(t *testing.T) {
	const target, cpuTarget, interval = 50 * time.Millisecond, time.Millisecond, 100 * time.Millisecond
	clock := clockwork.NewFakeClock()
	runQueue := time.Duration(-1) // what the runtime reports for the next interval; -1: no wake-ups
	reads := 0
	o := defaultOptions()
	o.clock, o.overloadTarget, o.overloadInterval, o.overloadCPU = clock, target, interval, cpuTarget
	o.runQueueWait = func() time.Duration { reads++; return runQueue }
	ov := newOverload(o, slog.New(slog.DiscardHandler), noop.NewMeterProvider().Meter("test"))
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t"}}}
	admitted := func(n int) (ok int, last error) {
		for range n {
			if err := ov.allow("ns", wf); err != nil {
				last = err
			} else {
				ok++
			}
		}
		return ok, last
	}
	interval1 := func(wait time.Duration) { // an interval whose run-queue wait was wait
		runQueue = wait
		clock.Advance(interval)
		admitted(1)
	}

	for _, wait := range []time.Duration{-1, 0, cpuTarget / 2, cpuTarget, 5 * cpuTarget, 0, cpuTarget} { // at most one interval over
		interval1(wait)
	}
	if n, err := admitted(100); n != 100 {
		t.Fatalf("run-queue waits at most the target, or over it for one interval: %d of 100 admitted (%v), want all", n, err)
	}

	interval1(2 * cpuTarget)
	interval1(2 * cpuTarget)
	n, err := admitted(100)
	if n != 50 {
		t.Fatalf("after two intervals at twice the CPU target: %d of 100 admitted, want 50 (a cut of target/wait)", n)
	}
	r, ok := err.(*refusal)
	if !ok || r.reason != ReasonOverloaded || r.retry != 2*time.Millisecond+interval ||
		!strings.Contains(r.msg, "waits for a CPU 2ms (target 1ms)") {
		t.Fatalf("refusal %#v, want OVERLOADED naming the CPU's wait and target, retry after the wait plus one interval", err)
	}

	for i := 0; ; i++ { // calm
		if i > 200 {
			t.Fatalf("still shedding after %d calm intervals", i)
		}
		interval1(cpuTarget / 10)
		if n, _ := admitted(100); n == 100 {
			break
		}
	}

	o.overloadCPU, reads = 0, 0
	off := newOverload(o, slog.New(slog.DiscardHandler), noop.NewMeterProvider().Meter("test"))
	runQueue = time.Second
	for range 10 {
		clock.Advance(interval)
		if err := off.allow("ns", wf); err != nil {
			t.Fatalf("CPU controller off: refused %v", err)
		}
	}
	if reads != 0 {
		t.Errorf("CPU controller off: the run queue was read %d times", reads)
	}
}

// The runtime's run-queue histogram: an interval's 90th percentile is the
// lower bound of the bucket that holds it; an interval with no wake-ups
// has none; and the real runtime's metric is read (goroutines that wake
// are recorded).
func TestRunQueueQuantile(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 0.001, 0.002, 0.004, math.Inf(1)}
	last := []uint64{5, 5, 5, 5, 5}
	for _, tc := range []struct {
		counts []uint64
		want   time.Duration
	}{
		{[]uint64{5, 5, 5, 5, 5}, -1},                       // nothing since last
		{[]uint64{5, 95, 5, 5, 5}, 0},                       // every wake-up under 1ms
		{[]uint64{5, 85, 15, 5, 5}, time.Millisecond},       // 80 under 1ms, 10 in [1ms, 2ms): the 82nd of 90 is there
		{[]uint64{5, 50, 50, 5, 5}, time.Millisecond},       // half and half
		{[]uint64{5, 10, 10, 10, 75}, 4 * time.Millisecond}, // most over 4ms (the last bucket's lower bound)
		{[]uint64{6, 5, 5, 5, 5}, 0},                        // the −Inf bucket counts as 0
	} {
		var total uint64
		for i := range tc.counts {
			total += tc.counts[i] - last[i]
		}
		if got := histogramQuantile(buckets, tc.counts, last, total, runQueueQuantile); got != tc.want {
			t.Errorf("counts %v over %v: %v, want %v", tc.counts, last, got, tc.want)
		}
	}

	q := newRunQueue()
	for i := 0; q.wait() < 0; i++ {
		if i == 100 {
			t.Fatalf("no run-queue wait recorded after %d rounds of 1,000 goroutines", i)
		}
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(runtime.Gosched)
		}
		wg.Wait()
	}
}

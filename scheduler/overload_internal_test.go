package scheduler

import (
	"log/slog"
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

package scheduler

import (
	"testing"
	"time"
)

// Once the stop began, optional work is refused, but an obligation started
// by work in flight runs, and the stop waits for it; once the stop is over,
// both are refused.
func TestWorkGroupStopWaitsForObligations(t *testing.T) {
	w := newWorkGroup()
	proceed := make(chan struct{})
	obligationRan := make(chan struct{})
	var obligationStarted, optionalStarted bool
	if !w.goOptional(func() {
		<-proceed // the stop has begun
		optionalStarted = w.goOptional(func() { t.Error("optional work ran after the stop began") })
		obligationStarted = w.goObligation(func() {
			time.Sleep(10 * time.Millisecond) // still running when the work that started it ends
			close(obligationRan)
		})
	}) {
		t.Fatal("optional work refused before the stop")
	}

	stopped := make(chan struct{})
	go func() { w.closeAndWait(); close(stopped) }()
	waitClosed(t, w)
	close(proceed)
	<-stopped
	select {
	case <-obligationRan:
	default:
		t.Fatal("the stop returned before the obligation its work started had run")
	}
	if optionalStarted || !obligationStarted {
		t.Fatalf("after the stop began: optional started %v (want false), obligation started %v (want true)", optionalStarted, obligationStarted)
	}
	if w.goObligation(func() { t.Error("obligation ran after the stop") }) {
		t.Fatal("obligation accepted after the stop was over")
	}
	if _, ok := w.hold(); ok {
		t.Fatal("hold accepted after the stop was over")
	}
}

// A hold (a direct reservation) keeps the stop waiting until it is
// released, and its take-back is accepted meanwhile.
func TestWorkGroupHoldKeepsTheStopWaiting(t *testing.T) {
	w := newWorkGroup()
	release, ok := w.hold()
	if !ok {
		t.Fatal("hold refused before the stop")
	}
	stopped := make(chan struct{})
	go func() { w.closeAndWait(); close(stopped) }()
	waitClosed(t, w)
	if _, ok := w.hold(); ok {
		t.Fatal("a new hold accepted after the stop began")
	}
	took := make(chan struct{})
	if !w.goObligation(func() { close(took) }) {
		t.Fatal("the held slot's take-back refused")
	}
	<-took
	select {
	case <-stopped:
		t.Fatal("the stop returned while a slot was held")
	default:
	}
	release()
	release() // twice is once
	<-stopped
}

// waitClosed returns once closeAndWait has begun (optional work refused).
func waitClosed(t *testing.T, w *workGroup) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("closeAndWait did not begin")
		}
		time.Sleep(time.Millisecond)
	}
}

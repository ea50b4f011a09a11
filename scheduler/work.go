package scheduler

import "sync"

// workGroup is the background work a scheduler's shutdown waits for:
// result writes, claims, take-backs and expiries. Work is of two kinds.
//
//   - Optional work (a claim from the ready queue, a result's write, a
//     claim reserved inside another write) is refused once the shutdown
//     began waiting: what it would have done is left to other schedulers
//     (the ready entry stays; the agent keeps its result and delivers it
//     elsewhere).
//   - An obligation finishes what committed work began: taking back an
//     attempt claimed for an agent that never got it. It is accepted until
//     the shutdown's wait is over, so a claim that commits while the
//     scheduler stops is always taken back, never left RUNNING and locked
//     to an agent until its complete-by.
//
// Obligations are started by work in flight (a claim, a result's write that
// claimed the next step) or by a direct reservation, which holds the group
// until the claim is delivered: the wait cannot end before they are
// started. One started after the wait ended (a stream that outlived the
// drain timeout) is refused; its attempt is recovered at its complete-by.
type workGroup struct {
	mu      sync.Mutex
	idle    *sync.Cond // broadcast when running drops to 0
	running int
	closed  bool // the shutdown began waiting: optional work is refused
	done    bool // the wait is over: everything is refused
}

func newWorkGroup() *workGroup {
	w := &workGroup{}
	w.idle = sync.NewCond(&w.mu)
	return w
}

// goOptional runs f in a goroutine the shutdown waits for, unless the
// shutdown began: then f does not run and goOptional reports false.
func (w *workGroup) goOptional(f func()) bool { return w.start(false, f) }

// goObligation runs f in a goroutine the shutdown waits for, unless the
// shutdown's wait is over: then f does not run and goObligation reports
// false.
func (w *workGroup) goObligation(f func()) bool { return w.start(true, f) }

func (w *workGroup) start(obligation bool, f func()) bool {
	if !w.add(obligation) {
		return false
	}
	go func() {
		defer w.finish()
		f()
	}()
	return true
}

// hold counts the caller as optional work until it calls release (once):
// the shutdown waits for it. It reports false, and holds nothing, once the
// shutdown began.
func (w *workGroup) hold() (release func(), ok bool) {
	if !w.add(false) {
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(w.finish) }, true
}

func (w *workGroup) add(obligation bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || (w.closed && !obligation) {
		return false
	}
	w.running++
	return true
}

func (w *workGroup) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	if w.running == 0 {
		w.idle.Broadcast()
	}
}

// closeAndWait refuses optional work from now on and returns once no work
// runs; from then on it refuses obligations too.
func (w *workGroup) closeAndWait() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for w.running > 0 {
		w.idle.Wait()
	}
	w.done = true
}

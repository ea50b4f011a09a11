package store

import "time"

// The adaptive commit window. Group commit (batch.go) never waits to fill a
// batch, which is right for an idle store (a lone write commits at once)
// and for a saturated one (writes queue behind the transactions in flight
// and form large batches by themselves). In between, at a few thousand
// writes per second, writes arrive one at a time into an idle committer and
// each pays a transaction (and an fsync) of its own: 2–3 transactions per
// one-step task at 1,000 tasks/s, against 0.2 at saturation.
//
// So a committer about to cut a small batch holds it open for company, but
// only when company is expected: when the writes of the recent past arrived
// less than one window apart. It waits until the oldest queued write has
// waited one window (WithCommitWindow, default defaultCommitWindow), or
// until the queue holds a good batch (windowFull), whichever comes first. A write therefore waits at most one
// window more than it would have, and only when the store is busy enough
// that the wait buys a shared transaction.

const (
	// defaultCommitWindow is how long the oldest write of a batch may be
	// held for company (WithCommitWindow).
	defaultCommitWindow = time.Millisecond
	// gapWeight is the weight of the newest inter-arrival gap in the
	// moving average (1/gapWeight).
	gapWeight = 8
)

// arrivals estimates how far apart writes arrive: an exponentially weighted
// moving average of the gaps between consecutive writes. Not safe for
// concurrent use (the committer's mutex guards it).
type arrivals struct {
	last time.Time
	gap  time.Duration
}

// add records a write arriving at now. A long idle gap counts as at most
// ten windows, so that a burst after a pause is recognized within a few
// writes.
func (a *arrivals) add(now time.Time, window time.Duration) {
	if a.last.IsZero() {
		a.last, a.gap = now, 10*window
		return
	}
	g := min(now.Sub(a.last), 10*window)
	a.last = now
	a.gap += (g - a.gap) / gapWeight
}

// holdFor returns how long a committer about to cut a batch should wait for
// more writes: zero unless the window is on, the queue holds fewer than
// full writes, writes arrive less than a window apart, and the oldest
// queued write (queued at oldest) has waited less than the window.
func holdFor(now, oldest time.Time, queued, full int, gap, window time.Duration) time.Duration {
	if window <= 0 || queued == 0 || queued >= full || gap >= window {
		return 0
	}
	return max(0, oldest.Add(window).Sub(now))
}

// commitWindow is the committer's window state, guarded by committer.mu.
type commitWindow struct {
	length  time.Duration // 0: off
	arr     arrivals
	holding bool          // a committer is waiting for company
	wake    chan struct{} // wakes the holder when the queue holds a good batch
	timer   *time.Timer   // the holder's timer, reused
}

// windowFull is the queue length at which a batch is worth committing at
// once.
func (c *committer) windowFull() int { return max(2, c.maxBatch/4) }

// arrive notes the arrival of r, just queued. It wakes a committer holding
// the window once the queue holds a good batch, and reports whether the
// holder overslept: the oldest queued write has waited longer than the
// window, so another committer should cut the batch now. c.mu is held.
func (c *committer) arrive(r *writeReq) (overdue bool) {
	w := &c.window
	if w.length <= 0 {
		return false
	}
	now := time.Now()
	r.queuedAt = now
	w.arr.add(now, w.length)
	if !w.holding {
		return false
	}
	if len(c.updates)+len(c.creates) >= c.windowFull() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return now.Sub(c.oldestQueued()) > w.length
}

// oldestQueued is when the oldest queued write was queued. c.mu is held.
func (c *committer) oldestQueued() time.Time {
	var oldest time.Time
	for _, q := range [][]*writeReq{c.updates, c.creates} {
		if len(q) > 0 && (oldest.IsZero() || q[0].queuedAt.Before(oldest)) {
			oldest = q[0].queuedAt
		}
	}
	return oldest
}

// holdWindow waits, when holdFor says so, for more writes to join the batch
// about to be cut. One committer holds at a time; the others cut at once.
// c.mu is held on entry and on return (and released while waiting).
func (c *committer) holdWindow() {
	w := &c.window
	if w.length <= 0 || w.holding {
		return
	}
	queued := len(c.updates) + len(c.creates)
	if queued == 0 {
		return
	}
	d := holdFor(time.Now(), c.oldestQueued(), queued, c.windowFull(), w.arr.gap, w.length)
	if d <= 0 {
		return
	}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	select {
	case <-w.wake: // left over from an earlier hold
	default:
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d) // Go ≥ 1.23: no stale tick is delivered after Reset
	}
	w.holding = true
	c.mu.Unlock()
	select {
	case <-w.timer.C:
	case <-w.wake:
	}
	c.mu.Lock()
	w.holding = false
}

package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/reeve-org/reeve/internal/store"
)

// WithArchiveDedupWindow sets how long after a task moved to the archive a
// submission of its id is still recognized without the archive: while the
// archive is unavailable, a submission with a chosen id that etcd does not
// hold is created when no task with that id moved within the window, and
// refused (UNAVAILABLE) only when one did. Default 1 h; 0 turns the window
// off (every such submission waits for the archive). Each scheduler keeps
// 8 bytes per task moved within the window in memory, and etcd as much
// (docs/archive.md).
func WithArchiveDedupWindow(d time.Duration) Option {
	return func(o *options) { o.archiveDedupWindow = d }
}

// DefaultArchiveDedupWindow is WithArchiveDedupWindow's default.
const DefaultArchiveDedupWindow = time.Hour

// dedupSyncTimeout bounds the wait for the window to cover what a
// submission read from etcd.
const dedupSyncTimeout = 2 * time.Second

// errWindowNotSynced: the window could not be shown to cover a read.
var errWindowNotSynced = errors.New("the deduplication window is not up to date")

// dedupWindow holds the fingerprints of the tasks moved to the archive
// within the window (store.WatchMoved), so that a submission can be told
// apart from a resubmission while the archive is unavailable.
type dedupWindow struct {
	window time.Duration
	now    func() time.Time

	mu       sync.Mutex
	synced   *sync.Cond
	rev      int64 // every moved/ key up to this revision is in batches; 0: not yet listed
	batches  []store.MovedBatch
	progress chan struct{} // asks the watch for a progress notification
}

func newDedupWindow(window time.Duration, now func() time.Time) *dedupWindow {
	w := &dedupWindow{window: window, now: now, progress: make(chan struct{}, 1)}
	w.synced = sync.NewCond(&w.mu)
	return w
}

// run follows the moved/ keys until ctx ends, and deletes those older than
// the window every interval (any scheduler may: the delete is idempotent).
func (w *dedupWindow) run(ctx context.Context, st *store.Store, interval time.Duration, log func(msg string, err error)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.WatchMoved(ctx, func() time.Time { return w.now().Add(-w.window) }, store.MovedFollower{
			Reset:    w.reset,
			Batch:    w.add,
			Synced:   w.sync,
			Progress: w.progress,
		})
	}()
	defer func() { <-done }()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.synced.Broadcast()
			w.mu.Unlock()
			return
		case <-t.C:
		}
		w.expire()
		// A margin of a minute: a mover's clock may be behind ours.
		if err := st.DeleteMovedBefore(ctx, w.now().Add(-w.window-time.Minute)); err != nil && ctx.Err() == nil {
			log("delete moved task fingerprints past the deduplication window", err)
		}
	}
}

func (w *dedupWindow) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches, w.rev = nil, 0
}

func (w *dedupWindow) add(b store.MovedBatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, b)
}

func (w *dedupWindow) sync(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev > w.rev {
		w.rev = rev
		w.synced.Broadcast()
	}
}

// expire forgets the batches of moves before the window.
func (w *dedupWindow) expire() {
	cutoff := w.now().Add(-w.window)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = slices.DeleteFunc(w.batches, func(b store.MovedBatch) bool { return b.At.Before(cutoff) })
}

// moved reports whether the task ns/id (or one sharing its fingerprint)
// moved to the archive within the window. rev is the etcd revision at which
// the caller found the task absent from etcd: moved waits until the window
// holds every move up to rev, so a task that left etcd before that read is
// always found. It returns errWindowNotSynced when that takes longer than
// dedupSyncTimeout (the watch is broken: etcd is unreachable).
func (w *dedupWindow) moved(ctx context.Context, ns, id string, rev int64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, dedupSyncTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.synced.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.rev < rev {
		select {
		case w.progress <- struct{}{}:
		default:
		}
		if ctx.Err() != nil {
			return false, errWindowNotSynced
		}
		w.synced.Wait()
	}
	fp := store.Fingerprint(ns, id)
	for _, b := range w.batches {
		if _, found := slices.BinarySearch(b.Fingerprints, fp); found {
			return true, nil
		}
	}
	return false, nil
}

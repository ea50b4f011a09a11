package supervisor

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/reeve-org/reeve/internal/store"
)

// The second deadline index (internal/store/slotdeadlines.go): a
// dispatched attempt whose claim took a max_running slot has its
// complete-by in its slot key's value, not in deadlines/. slots/ holds at
// most the sum of the types' limits, so while leading the supervisor keeps
// every slot's deadline in memory, listed once and followed by a watch
// (followSlots), and each pass recovers the expired ones as it recovers
// those of deadlines/. Until the view is listed (and after its watch
// broke, until it is listed again) a pass reads slots/ itself.

// slotView is the leader's copy of the deadlines the slot keys hold.
type slotView struct {
	mu     sync.Mutex
	synced bool
	byKey  map[string]store.Expired
}

func newSlotView() *slotView { return &slotView{byKey: map[string]store.Expired{}} }

// reset replaces the view with a listing.
func (v *slotView) reset(list []store.Expired) {
	v.mu.Lock()
	defer v.mu.Unlock()
	clear(v.byKey)
	for _, d := range list {
		v.byKey[d.Key] = d
	}
	v.synced = true
}

// apply records one change of a slot key.
func (v *slotView) apply(e store.SlotDeadlineEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.OK {
		v.byKey[e.Key] = e.Deadline
	} else {
		delete(v.byKey, e.Key)
	}
}

func (v *slotView) unsync() {
	v.mu.Lock()
	v.synced = false
	v.mu.Unlock()
}

// expired returns the deadlines at or before now, earliest first; false
// when the view is not synced.
func (v *slotView) expired(now time.Time) ([]store.Expired, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.synced {
		return nil, false
	}
	var out []store.Expired
	for _, d := range v.byKey {
		if !d.CompleteBy.After(now) {
			out = append(out, d)
		}
	}
	sortExpired(out)
	return out, true
}

// next returns the earliest deadline after from and before until.
func (v *slotView) next(from, until time.Time) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var at time.Time
	for _, d := range v.byKey {
		if d.CompleteBy.After(from) && d.CompleteBy.Before(until) && (at.IsZero() || d.CompleteBy.Before(at)) {
			at = d.CompleteBy
		}
	}
	return at, !at.IsZero()
}

func sortExpired(ds []store.Expired) {
	slices.SortFunc(ds, func(a, b store.Expired) int {
		if c := a.CompleteBy.Compare(b.CompleteBy); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

// followSlots keeps s.slots current while ctx lasts, and reports every
// deadline a slot key gets to w (so that the leader wakes at it).
func (s *Supervisor) followSlots(ctx context.Context, w *waker) {
	defer s.slots.unsync()
	for ctx.Err() == nil {
		list, rev, err := s.store.ListSlotDeadlines(ctx)
		if err != nil {
			s.sleep(ctx, time.Second)
			continue
		}
		s.slots.reset(list)
		for _, d := range list {
			w.add(d.CompleteBy)
		}
		err = s.store.WatchSlotDeadlines(ctx, rev, func(e store.SlotDeadlineEvent) {
			s.slots.apply(e)
			if e.OK {
				w.add(e.Deadline.CompleteBy)
			}
		})
		s.slots.unsync()
		if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) {
			s.log.Warn("watch slot deadlines", "err", err)
			s.sleep(ctx, time.Second)
		}
	}
}

// expiredSlots returns the slot deadlines expired by now, earliest first:
// from the view, or read from etcd while the view is not synced.
func (s *Supervisor) expiredSlots(ctx context.Context, now time.Time) ([]store.Expired, error) {
	if out, ok := s.slots.expired(now); ok {
		return out, nil
	}
	list, _, err := s.store.ListSlotDeadlines(ctx)
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, d := range list {
		if !d.CompleteBy.After(now) {
			out = append(out, d)
		}
	}
	sortExpired(out)
	return out, nil
}

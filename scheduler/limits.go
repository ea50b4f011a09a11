package scheduler

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Flow control (issue 36): limits and pauses per step type of a namespace,
// as the dispatcher applies them (docs/architecture.md, "Flow control").
//
// Every scheduler follows, through one etcd watch per key family
// (store.WatchFlow), the step types' settings (queues/), the max_running
// slots held (slots/, derived from the task records) and the live
// schedulers (schedulers/). Before it claims a ready step of a type with
// settings, the dispatcher asks take: a paused type takes nothing; a type
// with max_running takes a free slot number (1..max_running) that no
// dispatched attempt holds and no claim of this scheduler has chosen; a
// type with a rate takes a token of this scheduler's share of the rate. The
// claim writes the slot into the step (Step.slot, slot_limit) and the
// store derives the slot key from it and compares, in the claim's
// transaction, that the slot is free and no slot above the limit is held
// (store/queues.go): what another scheduler took meanwhile fails the claim
// (store.ErrSlotTaken), which then waits for its turn again. A type
// without settings costs nothing: one map lookup.

// flowControl is the dispatcher's view of flow control. Guarded by the
// dispatcher's mu.
type flowControl struct {
	configs    map[queueKey]*reevev1.QueueConfig
	held       map[queueKey]map[int32]bool             // slots held, as the watch shows them
	reserved   map[queueKey]map[int32]*slotReservation // slots chosen by this scheduler's claims
	schedulers map[string]bool
	buckets    map[queueKey]*bucket
	synced     [3]bool // per store.FlowKind: listed since the last reset
	// wakeAt is the earliest time a throttled type has a token again; zero
	// when none waits for one.
	wakeAt time.Time
}

// slotReservation is a slot chosen for a claim, kept until the watch
// shows the slot key (or the claim failed): until then, no other claim
// here chooses it.
type slotReservation struct{ inflight bool }

// bucket is this scheduler's share of a type's rate.
type bucket struct {
	lim         *rate.Limiter
	rate        float64
	burst, n    int32
	lastRefusal time.Time
}

// flowSlot is what a claim takes: the slot (0: none) and the limit it was
// chosen under.
type flowSlot struct{ slot, limit int32 }

func newFlowControl() *flowControl {
	return &flowControl{
		configs:    map[queueKey]*reevev1.QueueConfig{},
		held:       map[queueKey]map[int32]bool{},
		reserved:   map[queueKey]map[int32]*slotReservation{},
		schedulers: map[string]bool{},
		buckets:    map[queueKey]*bucket{},
	}
}

// ready reports whether the settings and held slots are known: until
// they are, nothing is dispatched (a limit not yet seen must not be
// overrun).
func (f *flowControl) ready() bool {
	return f.synced[store.FlowQueue] && f.synced[store.FlowSlot]
}

// controlled reports whether k has settings: its steps are claimed only by
// the dispatcher (take), never inside another write.
func (f *flowControl) controlled(k queueKey) bool {
	return !f.ready() || f.configs[k] != nil
}

// apply records one change; it reports whether dispatch may have room now.
func (f *flowControl) apply(ev store.FlowEvent) bool {
	if ev.Reset {
		f.synced[ev.Kind] = false
		switch ev.Kind {
		case store.FlowQueue:
			clear(f.configs)
		case store.FlowSlot:
			clear(f.held)
			// A claim that committed before the reset is in the listing
			// that follows; one in flight keeps its reservation.
			for k, rs := range f.reserved {
				for s, r := range rs {
					if !r.inflight {
						delete(rs, s)
					}
				}
				if len(rs) == 0 {
					delete(f.reserved, k)
				}
			}
		case store.FlowScheduler:
			clear(f.schedulers)
		}
		return false
	}
	if ev.Synced {
		f.synced[ev.Kind] = true
		return true
	}
	k := queueKey{ev.Namespace, ev.Type}
	switch ev.Kind {
	case store.FlowQueue:
		if ev.Deleted || ev.Config == nil {
			delete(f.configs, k)
			delete(f.buckets, k)
		} else {
			f.configs[k] = ev.Config
		}
	case store.FlowSlot:
		if ev.Deleted {
			delete(f.held[k], ev.Slot)
			if len(f.held[k]) == 0 {
				delete(f.held, k)
			}
			return true
		}
		if f.held[k] == nil {
			f.held[k] = map[int32]bool{}
		}
		f.held[k][ev.Slot] = true
		if rs := f.reserved[k]; rs != nil {
			// Taken, by this scheduler's claim or another's: held covers it.
			delete(rs, ev.Slot)
			if len(rs) == 0 {
				delete(f.reserved, k)
			}
		}
		return false
	case store.FlowScheduler:
		if ev.Deleted {
			delete(f.schedulers, ev.Scheduler)
		} else {
			f.schedulers[ev.Scheduler] = true
		}
	}
	return true
}

// taken counts the slots of k held or chosen, and whether one lies above
// limit.
func (f *flowControl) taken(k queueKey, limit int32) (n int, above bool) {
	for s := range f.held[k] {
		n++
		above = above || s > limit
	}
	for s := range f.reserved[k] {
		if !f.held[k][s] {
			n++
			above = above || s > limit
		}
	}
	return n, above
}

// take decides whether a step of k may be claimed now, and reserves what
// the claim takes. ok false: nothing of k is dispatched now.
func (f *flowControl) take(k queueKey, now time.Time) (flowSlot, bool) {
	if !f.ready() {
		return flowSlot{}, false
	}
	cfg := f.configs[k]
	if cfg == nil {
		return flowSlot{}, true
	}
	if cfg.GetPaused() {
		return flowSlot{}, false
	}
	var fs flowSlot
	if m := cfg.GetMaxRunning(); m > 0 {
		n, above := f.taken(k, m)
		if above || n >= int(m) {
			return flowSlot{}, false
		}
		for s := int32(1); s <= m; s++ {
			if !f.held[k][s] && f.reserved[k][s] == nil {
				fs = flowSlot{slot: s, limit: m}
				break
			}
		}
		if fs.slot == 0 {
			return flowSlot{}, false
		}
	}
	if cfg.GetRate() > 0 {
		b := f.bucketOf(k, cfg, now)
		if !b.lim.AllowN(now, 1) {
			// When the next token comes: the dispatcher looks again then.
			r := b.lim.ReserveN(now, 1)
			at := now.Add(r.DelayFrom(now))
			r.CancelAt(now)
			if f.wakeAt.IsZero() || at.Before(f.wakeAt) {
				f.wakeAt = at
			}
			b.lastRefusal = now
			return flowSlot{}, false
		}
	}
	if fs.slot > 0 {
		if f.reserved[k] == nil {
			f.reserved[k] = map[int32]*slotReservation{}
		}
		f.reserved[k][fs.slot] = &slotReservation{inflight: true}
	}
	return fs, true
}

// claimed ends a claim's hold on its slot: a failed claim gives it back; a
// committed one keeps it reserved until the watch shows it held.
func (f *flowControl) claimed(k queueKey, fs flowSlot, committed bool) {
	if fs.slot == 0 {
		return
	}
	r := f.reserved[k][fs.slot]
	if r == nil {
		return // the watch showed it already
	}
	if committed {
		r.inflight = false
		return
	}
	delete(f.reserved[k], fs.slot)
	if len(f.reserved[k]) == 0 {
		delete(f.reserved, k)
	}
}

// bucketOf returns k's token bucket, sized to this scheduler's share of
// the rate and burst: each of the n live schedulers takes rate/n per
// second with a burst of burst/n (at least 1), so that together they never
// start more than the rate over time and the burst at once (with fewer
// than burst schedulers).
func (f *flowControl) bucketOf(k queueKey, cfg *reevev1.QueueConfig, now time.Time) *bucket {
	n := int32(max(1, len(f.schedulers)))
	burst := max(1, cfg.GetBurst())
	b := f.buckets[k]
	if b != nil && b.rate == cfg.GetRate() && b.burst == burst && b.n == n {
		return b
	}
	share := max(1, int(math.Floor(float64(burst)/float64(n))))
	lim := rate.NewLimiter(rate.Limit(cfg.GetRate()/float64(n)), share)
	if b != nil {
		// A new share starts with the tokens the old one had left (at most
		// the new burst): a change of membership or limit grants no burst.
		if used := float64(share) - max(0, b.lim.TokensAt(now)); used >= 1 {
			lim.AllowN(now, min(share, int(math.Ceil(used))))
		}
	}
	b = &bucket{lim: lim, rate: cfg.GetRate(), burst: burst, n: n}
	f.buckets[k] = b
	return b
}

// waitReason says why the ready steps of k are not dispatched, "" when
// nothing of flow control holds them back.
func (f *flowControl) waitReason(k queueKey, now time.Time) string {
	cfg := f.configs[k]
	if cfg == nil {
		return ""
	}
	if cfg.GetPaused() {
		return fmt.Sprintf("waiting: queue %s is paused", k.typ)
	}
	if m := cfg.GetMaxRunning(); m > 0 {
		if n, above := f.taken(k, m); above || n >= int(m) {
			return fmt.Sprintf("waiting: %s is at its limit %d/%d", k.typ, len(f.held[k]), m)
		}
	}
	if b := f.buckets[k]; b != nil && cfg.GetRate() > 0 && now.Sub(b.lastRefusal) < time.Second {
		return fmt.Sprintf("waiting: %s is at its rate limit %g/s", k.typ, cfg.GetRate())
	}
	return ""
}

// applyFlow records one flow-control change.
func (d *dispatcher) applyFlow(ev store.FlowEvent) {
	d.lock()
	defer d.unlock()
	d.flow.apply(ev)
}

// takeSlot records in the claimed step the max_running slot its claim
// takes (none when slot is zero); the store derives the slot key from it
// and compares that it is free (store/queues.go).
func takeSlot(t *reevev1.Task, entry *storev1.ReadyEntry, slot flowSlot) {
	if slot.slot == 0 {
		return
	}
	st := taskstate.FindStep(t, entry.GetStep())
	st.Slot, st.SlotLimit = slot.slot, slot.limit
}

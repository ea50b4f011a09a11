package scheduler

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"math"
	"time"

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
// (store.ErrSlotTaken), which then waits for its turn again. A claim
// inside another write (writeClaim) takes a slot and a token through
// reserveDirect the same way. A type without settings costs nothing: one
// map lookup.

// flowControl is the dispatcher's view of flow control. Guarded by the
// dispatcher's mu.
type flowControl struct {
	configs    map[queueKey]*reevev1.QueueConfig
	held       map[queueKey]map[int32]bool             // slots held, as the watch shows them
	reserved   map[queueKey]map[int32]*slotReservation // slots chosen by this scheduler's claims
	schedulers map[string]bool
	buckets    map[queueKey]*bucket
	synced     [store.NumFlowKinds]bool // per store.FlowKind: listed since the last reset
	// Concurrency keys (steps' ConcurrencySpec), by "<ns>/<KeyID>": the
	// slots held, those chosen by claims here, and the ready items waiting
	// for one (parked out of their queue until a slot of their key frees).
	keyHeld     map[string]map[int32]bool
	keyReserved map[string]map[int32]*slotReservation
	parked      map[string][]*readyItem
	// freedAt holds, per type, when each slot freed that no claim here has
	// taken since (oldest first, at most maxFreed); idle reports, when a
	// claim takes a slot, how long the oldest of them stayed free
	// (reeve.queue.slot_idle).
	freedAt map[queueKey][]time.Time
	idle    func(k queueKey, d time.Duration)
	// throttled counts the dispatches put off for want of a rate token
	// (reeve.queue.throttled).
	throttled map[queueKey]int64
	// wakeAt is the earliest time a throttled type has a token again; zero
	// when none waits for one.
	wakeAt time.Time
	// limitedBefore holds, while the queues/ watch lists again after a
	// restart, the types that had a max_running before it.
	limitedBefore map[queueKey]bool
	// settling holds, per type whose first max_running the watch just
	// delivered, until when nothing of it is claimed (adoptGrace,
	// flowadopt.go).
	settling map[queueKey]time.Time
}

// maxFreed bounds the freed times kept per type.
const maxFreed = 4096

// slotReservation is a slot chosen for a claim, kept until the watch
// shows the slot key (or the claim failed): until then, no other claim
// here chooses it.
type slotReservation struct{ inflight bool }

// bucket is this scheduler's share of a type's rate: a token bucket.
type bucket struct {
	rate        float64 // tokens per second
	size        float64 // the burst
	tokens      float64
	last        time.Time // when tokens was computed
	cfgRate     float64
	cfgBurst, n int32
	lastRefusal time.Time
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.size, b.tokens+b.rate*now.Sub(b.last).Seconds())
		b.last = now
	}
}

// take takes a token, or says how long until one comes.
func (b *bucket) take(now time.Time) (bool, time.Duration) {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// refund gives back a token whose claim started nothing.
func (b *bucket) refund(now time.Time) {
	b.refill(now)
	b.tokens = min(b.size, b.tokens+1)
}

// flowSlot is what a claim takes: the slot (0: none) and the limit it was
// chosen under.
type flowSlot struct {
	slot, limit int32
	key         string // the step's concurrency key ("<ns>/<KeyID>"); "" for none
	keySlot     int32
	token       *bucket // the bucket it took a rate token of; refunded when the claim fails
}

func newFlowControl() *flowControl {
	return &flowControl{
		configs:    map[queueKey]*reevev1.QueueConfig{},
		held:       map[queueKey]map[int32]bool{},
		reserved:   map[queueKey]map[int32]*slotReservation{},
		schedulers: map[string]bool{},
		buckets:    map[queueKey]*bucket{},
		throttled:  map[queueKey]int64{},
		freedAt:    map[queueKey][]time.Time{},

		keyHeld:     map[string]map[int32]bool{},
		keyReserved: map[string]map[int32]*slotReservation{},
		parked:      map[string][]*readyItem{},
	}
}

// ready reports whether the settings, held slots and live schedulers are
// known: until they are, nothing is dispatched (a limit not yet seen must
// not be overrun, nor a rate shared among too few).
func (f *flowControl) ready() bool {
	for _, ok := range f.synced {
		if !ok {
			return false
		}
	}
	return true
}

// apply records one change; it reports whether dispatch may have room now.
func (f *flowControl) apply(ev store.FlowEvent, now time.Time) bool {
	if ev.Reset {
		f.synced[ev.Kind] = false
		switch ev.Kind {
		case store.FlowQueue:
			// The types limited before the watch restarted: listed
			// again, they are no first limit (flowadopt.go).
			f.limitedBefore = map[queueKey]bool{}
			for k, cfg := range f.configs {
				if cfg.GetMaxRunning() > 0 {
					f.limitedBefore[k] = true
				}
			}
			clear(f.configs)
		case store.FlowSlot:
			clear(f.held)
			clear(f.freedAt)
			// A claim that committed before the reset is in the listing
			// that follows; one in flight keeps its reservation.
			dropCommitted(f.reserved)
		case store.FlowScheduler:
			clear(f.schedulers)
		case store.FlowKeySlot:
			clear(f.keyHeld)
			dropCommitted(f.keyReserved)
		}
		return false
	}
	if ev.Synced {
		f.synced[ev.Kind] = true
		if ev.Kind == store.FlowQueue {
			f.limitedBefore = nil
		}
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
			if f.configs[k].GetMaxRunning() > 0 && len(f.freedAt[k]) < maxFreed {
				f.freedAt[k] = append(f.freedAt[k], now)
			}
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
	case store.FlowKeySlot:
		key := ev.Namespace + "/" + ev.Key
		if ev.Deleted {
			delete(f.keyHeld[key], ev.Slot)
			if len(f.keyHeld[key]) == 0 {
				delete(f.keyHeld, key)
			}
			return true
		}
		if f.keyHeld[key] == nil {
			f.keyHeld[key] = map[int32]bool{}
		}
		f.keyHeld[key][ev.Slot] = true
		if rs := f.keyReserved[key]; rs != nil {
			delete(rs, ev.Slot)
			if len(rs) == 0 {
				delete(f.keyReserved, key)
			}
		}
		return false
	}
	return true
}

// dropCommitted forgets the reservations of claims that committed: after
// a watch reset, the listing that follows shows their slots.
func dropCommitted[K comparable](reserved map[K]map[int32]*slotReservation) {
	for k, rs := range reserved {
		for s, r := range rs {
			if !r.inflight {
				delete(rs, s)
			}
		}
		if len(rs) == 0 {
			delete(reserved, k)
		}
	}
}

// keyOf returns the concurrency key of a ready entry ("<ns>/<KeyID>") and
// its max_running; "" when it has none.
func keyOf(it *readyItem) (string, int32) {
	if it.entry.GetConcurrencyKey() == "" {
		return "", 0
	}
	return it.entry.GetNamespace() + "/" + it.entry.GetConcurrencyKey(), it.entry.GetConcurrencyMax()
}

// freeKeySlot returns a slot of key free for a claim (0 when none: every
// slot up to limit held or chosen, or one above it held).
func (f *flowControl) freeKeySlot(key string, limit int32) int32 {
	n := 0
	for s := range f.keyHeld[key] {
		if s > limit {
			return 0
		}
		n++
	}
	for s := range f.keyReserved[key] {
		if !f.keyHeld[key][s] {
			if s > limit {
				return 0
			}
			n++
		}
	}
	if n >= int(limit) {
		return 0
	}
	for s := int32(1); s <= limit; s++ {
		if !f.keyHeld[key][s] && f.keyReserved[key][s] == nil {
			return s
		}
	}
	return 0
}

// park takes it out of its queue to wait for a slot of its key, in order:
// it reports false (nothing done) when the key has a free slot or it has
// no key.
func (f *flowControl) park(it *readyItem) bool {
	key, limit := keyOf(it)
	if key == "" || !f.ready() || f.freeKeySlot(key, limit) != 0 {
		return false
	}
	f.parked[key] = append(f.parked[key], it)
	it.parked = true
	return true
}

// forget removes a parked item that left the ready queue.
func (f *flowControl) forget(it *readyItem) {
	if !it.parked {
		return
	}
	it.parked = false
	key, _ := keyOf(it)
	list := f.parked[key]
	for i, p := range list {
		if p == it {
			f.parked[key] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(f.parked[key]) == 0 {
		delete(f.parked, key)
	}
}

// unpark returns, in the order they were parked, the items waiting for a
// slot of key, which no longer count as parked.
func (f *flowControl) unpark(key string) []*readyItem {
	list := f.parked[key]
	delete(f.parked, key)
	for _, it := range list {
		it.parked = false
	}
	return list
}

// takeKey reserves a slot of it's key for its claim; false when none is
// free (another claim here took the last one).
func (f *flowControl) takeKey(it *readyItem, fs *flowSlot) bool {
	key, limit := keyOf(it)
	if key == "" {
		return true
	}
	s := f.freeKeySlot(key, limit)
	if s == 0 {
		return false
	}
	if f.keyReserved[key] == nil {
		f.keyReserved[key] = map[int32]*slotReservation{}
	}
	f.keyReserved[key][s] = &slotReservation{inflight: true}
	fs.key, fs.keySlot = key, s
	return true
}

// claimedKey ends a claim's hold on its key slot, as claimed does for a
// type's slot.
// A claim that failed frees its slot for the steps parked for the key:
// the caller queues them again (requeueParked).
func (f *flowControl) claimedKey(fs flowSlot, committed bool) {
	if fs.keySlot == 0 {
		return
	}
	r := f.keyReserved[fs.key][fs.keySlot]
	if r == nil {
		return
	}
	if committed {
		r.inflight = false
		return
	}
	delete(f.keyReserved[fs.key], fs.keySlot)
	if len(f.keyReserved[fs.key]) == 0 {
		delete(f.keyReserved, fs.key)
	}
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
	if until, ok := f.settling[k]; ok {
		if now.Before(until) {
			if f.wakeAt.IsZero() || until.Before(f.wakeAt) {
				f.wakeAt = until // the dispatcher looks again then
			}
			return flowSlot{}, false
		}
		delete(f.settling, k)
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
		if ok, delay := b.take(now); !ok {
			// The dispatcher looks again when the next token comes.
			if at := now.Add(delay); f.wakeAt.IsZero() || at.Before(f.wakeAt) {
				f.wakeAt = at
			}
			b.lastRefusal = now
			f.throttled[k]++
			return flowSlot{}, false
		}
		fs.token = b
	}
	if fs.slot > 0 {
		if fr := f.freedAt[k]; len(fr) > 0 {
			if f.idle != nil {
				f.idle(k, now.Sub(fr[0]))
			}
			f.freedAt[k] = fr[1:]
		}
		if f.reserved[k] == nil {
			f.reserved[k] = map[int32]*slotReservation{}
		}
		f.reserved[k][fs.slot] = &slotReservation{inflight: true}
	}
	return fs, true
}

// claimed ends a claim's hold on its slot and token: a failed claim gives
// them back; a committed one keeps its slot reserved until the watch shows
// it held.
func (f *flowControl) claimed(k queueKey, fs flowSlot, committed bool, now time.Time) {
	if fs.token != nil && !committed {
		// Lost (e.g. to another scheduler's claim of the same step, which
		// took a token of its own) or not written: the step did not start.
		fs.token.refund(now)
	}
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
	if b != nil && b.cfgRate == cfg.GetRate() && b.cfgBurst == burst && b.n == n {
		return b
	}
	size := max(1, math.Floor(float64(burst)/float64(n)))
	nb := &bucket{rate: cfg.GetRate() / float64(n), size: size, tokens: size, last: now, cfgRate: cfg.GetRate(), cfgBurst: burst, n: n}
	if b != nil {
		// A new share keeps the tokens the old one had left (at most its
		// size): a change of membership or limit grants no new burst.
		b.refill(now)
		nb.tokens = min(size, b.tokens)
	}
	f.buckets[k] = nb
	return nb
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
	if ev.Kind == store.FlowSlot && ev.Deleted {
		defer func() {
			// Nothing of the type waits: the slot's idle time is no one's wait.
			if q := d.queues[queueKey{ev.Namespace, ev.Type}]; q == nil || q.Len() == 0 {
				delete(d.flow.freedAt, queueKey{ev.Namespace, ev.Type})
			}
		}()
	}
	if ev.Kind == store.FlowTaskSlot || ev.Kind == store.FlowKeyWait {
		d.flow.apply(ev, d.clock.Now()) // the synced flags
		if key, look := d.taskKeys.apply(ev); look {
			d.admitKeys([]string{key}, ev.Synced || key == "")
		}
	} else if ev.Kind == store.FlowQueue && !ev.Reset && !ev.Synced {
		k := queueKey{ev.Namespace, ev.Type}
		had := d.flow.configs[k].GetMaxRunning() > 0 || d.flow.limitedBefore[k]
		now := d.clock.Now()
		d.flow.apply(ev, now)
		if !had && d.flow.configs[k].GetMaxRunning() > 0 {
			// A first limit while attempts of k may run (flowadopt.go): a
			// change the watch delivers (not a listing) waits for every
			// scheduler's adoptions before starting anything of k.
			if d.flow.synced[store.FlowQueue] {
				d.flow.settle(k, now.Add(adoptGrace))
			}
			d.adoptAgentsOf(k)
		}
	} else if d.flow.apply(ev, d.clock.Now()) && ev.Kind == store.FlowKeySlot {
		if ev.Synced {
			// Listed afresh: every parked step looks again.
			for key := range d.flow.parked {
				d.requeueParked(key)
			}
		} else {
			// A slot of the key freed.
			d.requeueParked(ev.Namespace + "/" + ev.Key)
		}
	}
	if d.flow.ready() {
		d.flowOnce.Do(func() { close(d.flowKnown) })
		if ev.Synced {
			d.admitKeys(nil, true) // taskkeys.go
		}
	}
}

// flowWait bounds how long an agent's registration waits for the first
// reading of the flow-control settings.
const flowWait = 10 * time.Second

// awaitFlow waits until the dispatcher read the flow-control settings,
// held slots and live schedulers once: an agent registers only then, so
// that nothing is dispatched to it under limits not yet known.
func (d *dispatcher) awaitFlow(ctx context.Context) error {
	t := time.NewTimer(flowWait)
	defer t.Stop()
	select {
	case <-d.flowKnown:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return status.Errorf(codes.Unavailable, "register: this scheduler has not read the queue limits from etcd within %s; retry", flowWait)
	}
}

// takeSlot records in the claimed step the max_running slot its claim
// takes (none when slot is zero); the store derives the slot key from it
// and compares that it is free (store/queues.go).
func takeSlot(t *reevev1.Task, entry *storev1.ReadyEntry, slot flowSlot) {
	if slot.slot == 0 && slot.keySlot == 0 {
		return
	}
	st := taskstate.FindStep(t, entry.GetStep())
	st.Slot, st.SlotLimit, st.SlotDeadline = slot.slot, slot.limit, slot.slot > 0
	st.KeySlot = slot.keySlot
	recordSlot(t, st)
}

// keyed reports whether st's current execution counts against a
// concurrency key: it is claimed by the dispatcher only, never inside
// another write.
func keyed(t *reevev1.Task, st *reevev1.Step) bool {
	id, _ := store.KeyID(t, st)
	return id != ""
}

// requeueParked queues again, in order, the steps parked for a slot of
// key. d.mu is held.
func (d *dispatcher) requeueParked(key string) {
	for _, it := range d.flow.unpark(key) {
		if d.items[it.key] == it && !it.claiming && it.fk == nil && it.heapIdx < 0 {
			d.enqueue(it)
		}
	}
}

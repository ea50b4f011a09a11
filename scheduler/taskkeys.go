package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Workflow concurrency keys (issue 36): at most max_running live tasks of
// a workflow per key value. A task holds a slot of its key from its
// creation (or admission) until it ends (Task.key_slot; the slot key
// taskslots/<ns>/<workflow>/<hash>/<slot> is derived from the record). A
// task submitted while its key has no free slot is created waiting: PENDING,
// nothing of it dispatched, with a key in keywait/ ordered by its create
// time. Every scheduler follows both families (store.WatchFlow) and admits
// the oldest waiting tasks of a key whenever its view shows free slots: the
// admission writes the slot into the task, compared absent like any slot,
// so of schedulers racing for it one wins. Level-triggered (a waiting key
// appearing or a slot freeing both trigger it), so no wake-up is lost.

// waiter is a task waiting for a slot of its workflow's key.
type waiter struct {
	created   int64
	id        string
	admitting bool
}

// taskKeys is the dispatcher's view of workflow concurrency keys, by
// "<ns>/<TaskKeyID>". Guarded by the dispatcher's mu.
type taskKeys struct {
	held     map[string]map[int32]bool
	reserved map[string]map[int32]*slotReservation
	waiting  map[string][]*waiter // oldest first
	limits   map[string]int32     // from the waiting keys' values
}

func newTaskKeys() *taskKeys {
	return &taskKeys{held: map[string]map[int32]bool{}, reserved: map[string]map[int32]*slotReservation{},
		waiting: map[string][]*waiter{}, limits: map[string]int32{}}
}

// applyTaskKey records one change; it reports the key to look at.
func (k *taskKeys) apply(ev store.FlowEvent) (string, bool) {
	key := ev.Namespace + "/" + ev.Key
	switch ev.Kind {
	case store.FlowTaskSlot:
		if ev.Reset {
			clear(k.held)
			dropCommitted(k.reserved)
			return "", false
		}
		if ev.Synced {
			return "", true
		}
		if ev.Deleted {
			delete(k.held[key], ev.Slot)
			if len(k.held[key]) == 0 {
				delete(k.held, key)
			}
			return key, true
		}
		if k.held[key] == nil {
			k.held[key] = map[int32]bool{}
		}
		k.held[key][ev.Slot] = true
		if rs := k.reserved[key]; rs != nil {
			delete(rs, ev.Slot)
			if len(rs) == 0 {
				delete(k.reserved, key)
			}
		}
		return "", false
	case store.FlowKeyWait:
		if ev.Reset {
			// Admissions in flight keep their entries' flag through the
			// listing that follows: entries are matched by id.
			clear(k.waiting)
			return "", false
		}
		if ev.Synced {
			return "", true
		}
		list := k.waiting[key]
		i, found := slices.BinarySearchFunc(list, ev, func(w *waiter, ev store.FlowEvent) int {
			if w.created != ev.Created {
				return int(min(max(w.created-ev.Created, -1), 1))
			}
			switch {
			case w.id < ev.TaskID:
				return -1
			case w.id > ev.TaskID:
				return 1
			}
			return 0
		})
		if ev.Deleted {
			if found {
				k.waiting[key] = slices.Delete(list, i, i+1)
				if len(k.waiting[key]) == 0 {
					delete(k.waiting, key)
					delete(k.limits, key)
				}
			}
			return "", false
		}
		if !found {
			k.waiting[key] = slices.Insert(list, i, &waiter{created: ev.Created, id: ev.TaskID})
		}
		k.limits[key] = ev.Limit
		return key, true
	}
	return "", false
}

// free returns the slots of key a new holder may take now, lowest first.
func (k *taskKeys) free(key string, limit int32) []int32 {
	n := 0
	for s := range k.held[key] {
		if s > limit {
			return nil
		}
		n++
	}
	for s := range k.reserved[key] {
		if !k.held[key][s] {
			if s > limit {
				return nil
			}
			n++
		}
	}
	var out []int32
	for s := int32(1); s <= limit && n+len(out) < int(limit); s++ {
		if !k.held[key][s] && k.reserved[key][s] == nil {
			out = append(out, s)
		}
	}
	return out
}

// admitKeys starts the admission of the oldest waiting tasks of each key
// given (every key with waiting tasks when all) that has free slots. d.mu
// is held.
func (d *dispatcher) admitKeys(keys []string, all bool) {
	tk := d.taskKeys
	if !d.flow.ready() {
		return
	}
	if all {
		keys = keys[:0]
		for key := range tk.waiting {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		list := tk.waiting[key]
		if len(list) == 0 {
			continue
		}
		free := tk.free(key, tk.limits[key])
		for _, w := range list {
			if len(free) == 0 {
				break
			}
			if w.admitting {
				continue
			}
			slot := free[0]
			free = free[1:]
			if tk.reserved[key] == nil {
				tk.reserved[key] = map[int32]*slotReservation{}
			}
			tk.reserved[key][slot] = &slotReservation{inflight: true}
			w.admitting = true
			ns, _, _ := cut(key)
			id := w.id
			if !d.work.goOptional(func() { d.admitted(key, id, slot, d.admitTask(ns, id, slot)) }) {
				w.admitting = false
				delete(tk.reserved[key], slot)
				return
			}
		}
	}
}

// admitted ends an admission: its slot's reservation, and the waiting
// entry's flag (the watch removes the entry of a task admitted).
func (d *dispatcher) admitted(key, id string, slot int32, err error) {
	d.lock()
	defer d.unlock()
	tk := d.taskKeys
	if r := tk.reserved[key][slot]; r != nil {
		if err == nil {
			r.inflight = false
		} else {
			delete(tk.reserved[key], slot)
		}
	}
	for _, w := range tk.waiting[key] {
		if w.id == id {
			w.admitting = false
		}
	}
	if err != nil && !errors.Is(err, store.ErrSlotTaken) && !errors.Is(err, taskstate.ErrNotQueued) && !store.IsNotFound(err) {
		d.log.Warn("admit task waiting for its concurrency key", "task_id", id, "slot", slot, "err", err)
	}
	if err != nil {
		d.admitKeys([]string{key}, false)
	}
}

// freeTaskSlot returns a slot of the task's workflow key that looks free
// (none for a task waiting for its start time: it queues when it starts),
// reserved for its creation (two creations here never take the same slot:
// one transaction must not write a key twice), or 0: the submission creates
// the task holding it (compared absent in the create), or waiting. The
// caller ends the reservation with createdTaskSlot.
func (d *dispatcher) freeTaskSlot(t *reevev1.Task) int32 {
	id, limit := store.TaskKeyID(t)
	if id == "" || !taskstate.KeyWaiting(t) {
		return 0 // none, or it waits for its start time first
	}
	d.lock()
	defer d.unlock()
	if !d.flow.ready() {
		return 0
	}
	key := t.GetNamespace() + "/" + id
	free := d.taskKeys.free(key, limit)
	if len(free) == 0 {
		return 0
	}
	if d.taskKeys.reserved[key] == nil {
		d.taskKeys.reserved[key] = map[int32]*slotReservation{}
	}
	d.taskKeys.reserved[key][free[0]] = &slotReservation{inflight: true}
	return free[0]
}

// createdTaskSlot ends the reservation freeTaskSlot made for t's creation:
// kept until the watch shows the slot held when the task was created with
// it, else given back.
func (d *dispatcher) createdTaskSlot(t *reevev1.Task, slot int32, created bool) {
	id, _ := store.TaskKeyID(t)
	if id == "" || slot == 0 {
		return
	}
	key := t.GetNamespace() + "/" + id
	d.lock()
	defer d.unlock()
	r := d.taskKeys.reserved[key][slot]
	if r == nil {
		return
	}
	if created {
		r.inflight = false
		return
	}
	delete(d.taskKeys.reserved[key], slot)
	d.admitKeys([]string{key}, false)
}

// admitKey gives a waiting task the slot of its workflow's key: its steps
// become ready. ErrNotQueued when it no longer waits.
func (e *engine) admitKey(ns, id string, slot int32) error {
	ctx, cancel := context.WithTimeout(e.base, claimTimeout)
	defer cancel()
	_, err := e.update(ctx, taskWrite{ns: ns, id: id,
		change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
			if !taskstate.KeyWaiting(t) {
				return effects{}, taskstate.ErrNotQueued
			}
			t.KeySlot = slot
			taskstate.StartWaits(t, now) // its ready waits and sleeps begin
			return effects{}, nil
		}})
	return err
}

func cut(key string) (ns, rest string, ok bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return key, "", false
}

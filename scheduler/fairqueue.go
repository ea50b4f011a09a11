package scheduler

import (
	"container/list"

	"go.opentelemetry.io/otel/attribute"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Priority and fairness (issue 36, item 3). The due steps of one (namespace,
// step type) wait here in a fairQueue: the dispatcher takes them by
// priority (1 first), within a priority round-robin across fairness keys
// (a task without a key has the shared key ""), and FIFO within a key. So a
// tenant's backlog of any size delays another tenant's next step of the
// same priority by at most one step of every other key with steps waiting:
// its fair share. Every operation is O(1) (the priorities are a fixed five).
// Fairness is this scheduler's: each scheduler orders the claims it makes
// (docs/architecture.md, "Dispatch: priority and fairness").

const numPriorities = workflow.LowestPriority - workflow.HighestPriority + 1

// fairQueue is the due, unclaimed items of one queueKey. Not safe for
// concurrent use: the dispatcher's mutex guards it.
type fairQueue struct {
	all    itemList // every item, in the order queued: the front waited longest
	levels [numPriorities]fairLevel
}

// fairLevel is the items of one priority: a ring of the keys that have
// items, in turn order.
type fairLevel struct {
	keys map[string]*fairKey
	ring list.List     // of *fairKey, each with at least one item
	turn *list.Element // in ring: the key served next; nil when empty
}

// fairKey is the items of one fairness key at one priority, FIFO.
type fairKey struct {
	name  string
	level *fairLevel
	items itemList
	elem  *list.Element // in level.ring
}

func newFairQueue() *fairQueue { return &fairQueue{all: itemList{link: linkAll}} }

// Len is the number of items queued.
func (q *fairQueue) Len() int { return q.all.n }

// levelOf is the index of the level of an item's priority. A priority out
// of range (a record written by another Reeve) counts as the default.
func levelOf(it *readyItem) int {
	p := workflow.EffectivePriority(it.entry.GetPriority())
	if p < workflow.HighestPriority || p > workflow.LowestPriority {
		p = workflow.DefaultPriority
	}
	return int(p - workflow.HighestPriority)
}

// push queues it last of its key. A key that had no items joins its level
// at the end of the current round: after every key already waiting had its
// turn, so that keys with one step each cannot starve one with many.
func (q *fairQueue) push(it *readyItem) {
	lv := &q.levels[levelOf(it)]
	name := it.entry.GetFairnessKey()
	fk := lv.keys[name]
	if fk == nil {
		if lv.keys == nil {
			lv.keys = map[string]*fairKey{}
		}
		fk = &fairKey{name: name, level: lv, items: itemList{link: linkKey}}
		lv.keys[name] = fk
		if lv.turn == nil {
			fk.elem = lv.ring.PushBack(fk)
			lv.turn = fk.elem
		} else {
			fk.elem = lv.ring.InsertBefore(fk, lv.turn)
		}
	}
	it.fk = fk
	fk.items.pushBack(it)
	q.all.pushBack(it)
}

// remove takes a queued item (it.fk set) out of the queue.
func (q *fairQueue) remove(it *readyItem) {
	fk := it.fk
	fk.items.remove(it)
	q.all.remove(it)
	it.fk = nil
	if fk.items.n == 0 {
		lv := fk.level
		if lv.turn == fk.elem {
			lv.advance()
		}
		lv.ring.Remove(fk.elem)
		if lv.ring.Len() == 0 {
			lv.turn = nil
		}
		delete(lv.keys, fk.name)
	}
}

// advance passes the turn to the next key of the ring.
func (lv *fairLevel) advance() {
	if lv.turn = lv.turn.Next(); lv.turn == nil {
		lv.turn = lv.ring.Front()
	}
}

// peek returns the item pop would return, or nil when empty.
func (q *fairQueue) peek() *readyItem {
	for i := range q.levels {
		if lv := &q.levels[i]; lv.turn != nil {
			return lv.turn.Value.(*fairKey).items.head
		}
	}
	return nil
}

// pop removes and returns the item to dispatch next: the first of the key
// whose turn it is at the highest priority with items, the turn then
// passing to the next key. nil when empty.
func (q *fairQueue) pop() *readyItem {
	for i := range q.levels {
		lv := &q.levels[i]
		if lv.turn == nil {
			continue
		}
		fk := lv.turn.Value.(*fairKey)
		it := fk.items.head
		lv.advance() // before remove, which drops fk when it was its last
		q.remove(it)
		return it
	}
	return nil
}

// oldest returns the item that has waited longest, or nil when empty.
func (q *fairQueue) oldest() *readyItem {
	return q.all.head
}

// waitsAtOrAbove reports whether an item of priority p (0: the default) or
// a higher one (a lower number) is queued.
func (q *fairQueue) waitsAtOrAbove(p int32) bool {
	p = workflow.EffectivePriority(p)
	for i := 0; i < numPriorities && int32(i)+workflow.HighestPriority <= p; i++ {
		if q.levels[i].turn != nil {
			return true
		}
	}
	return false
}

// itemList is a doubly linked list of readyItems through one of their
// links (intrusive: queueing an item allocates nothing).
type itemList struct {
	head, tail *readyItem
	n          int
	link       int // linkKey or linkAll: which of readyItem.links
}

// itemLink is an item's place in one itemList.
type itemLink struct{ prev, next *readyItem }

// The links of a readyItem: in its fairness key's items, in its queue's
// list of all items.
const (
	linkKey = iota
	linkAll
)

func (l *itemList) pushBack(it *readyItem) {
	ln := &it.links[l.link]
	ln.prev, ln.next = l.tail, nil
	if l.tail != nil {
		l.tail.links[l.link].next = it
	} else {
		l.head = it
	}
	l.tail = it
	l.n++
}

func (l *itemList) remove(it *readyItem) {
	ln := &it.links[l.link]
	if ln.prev != nil {
		ln.prev.links[l.link].next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.links[l.link].prev = ln.prev
	} else {
		l.tail = ln.prev
	}
	ln.prev, ln.next = nil, nil
	l.n--
}

// dispatchOrderAttrs are the attributes of an attempt's span that say
// where it stood in its queue: its priority, and its fairness key when it
// has one.
func dispatchOrderAttrs(t *reevev1.Task) []attribute.KeyValue {
	attrs := []attribute.KeyValue{telemetry.KeyPriority.Int(int(workflow.EffectivePriority(t.GetPriority())))}
	if k := t.GetFairnessKey(); k != "" {
		attrs = append(attrs, telemetry.KeyFairnessKey.String(k))
	}
	return attrs
}

package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jonboulle/clockwork"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

func fqItem(id string, prio int32, key string) *readyItem {
	return &readyItem{key: id, heapIdx: -1, entry: &storev1.ReadyEntry{TaskId: id, Priority: prio, FairnessKey: key}}
}

// drain pops every item and returns their ids in order.
func drain(q *fairQueue) []string {
	var out []string
	for q.Len() > 0 {
		if p := q.peek(); p == nil {
			panic("peek nil on a non-empty queue")
		}
		want := q.peek()
		it := q.pop()
		if it != want {
			panic("pop is not what peek said")
		}
		out = append(out, it.entry.GetTaskId())
	}
	if q.pop() != nil || q.peek() != nil || q.oldest() != nil {
		panic("empty queue returned an item")
	}
	return out
}

func eqIDs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// Priority first (0 is the default, 3), FIFO within a key.
func TestFairQueuePriorityThenFIFO(t *testing.T) {
	q := newFairQueue()
	for _, it := range []*readyItem{fqItem("d1", 0, ""), fqItem("l1", 5, ""), fqItem("h1", 1, ""), fqItem("d2", 3, ""), fqItem("h2", 1, ""), fqItem("p2", 2, "")} {
		q.push(it)
	}
	if o := q.oldest(); o.entry.GetTaskId() != "d1" {
		t.Fatalf("oldest %s, want d1", o.entry.GetTaskId())
	}
	eqIDs(t, drain(q), "h1", "h2", "p2", "d1", "d2", "l1")
}

// Round-robin across keys within a priority; a key that joins waits for
// the end of the current round; the shared key "" is one key.
func TestFairQueueRoundRobin(t *testing.T) {
	q := newFairQueue()
	for i := range 4 {
		q.push(fqItem(fmt.Sprint("a", i), 0, "A"))
	}
	q.push(fqItem("s0", 0, ""))
	q.push(fqItem("s1", 0, ""))
	eqIDs(t, []string{q.pop().entry.GetTaskId()}, "a0") // A's turn, then ""'s
	q.push(fqItem("b0", 0, "B"))                        // joins after "" and A
	eqIDs(t, drain(q), "s0", "a1", "b0", "s1", "a2", "a3")
}

// A flood of one key delays another key's next item by one item.
func TestFairQueueFlood(t *testing.T) {
	q := newFairQueue()
	for i := range 100_000 {
		q.push(fqItem(fmt.Sprint("a", i), 0, "A"))
	}
	for i := range 10 {
		q.pop()
		q.push(fqItem(fmt.Sprint("b", i), 0, "B"))
		if got := q.pop().entry.GetTaskId(); got[0] != 'a' {
			t.Fatalf("round %d: %s before A's turn", i, got)
		}
		if got := q.pop().entry.GetTaskId(); got != fmt.Sprint("b", i) {
			t.Fatalf("round %d: popped %s, want b%d", i, got, i)
		}
	}
	if q.Len() != 100_000-20 {
		t.Fatalf("len %d", q.Len())
	}
}

// Removing any item (a claim by another scheduler, a changed entry) keeps
// the order of the rest and the turn; a key emptied by removal leaves the
// ring.
func TestFairQueueRemove(t *testing.T) {
	q := newFairQueue()
	items := map[string]*readyItem{}
	for _, it := range []*readyItem{fqItem("a0", 0, "A"), fqItem("b0", 0, "B"), fqItem("c0", 0, "C"), fqItem("a1", 0, "A"), fqItem("b1", 0, "B"), fqItem("x", 1, "A")} {
		items[it.entry.GetTaskId()] = it
		q.push(it)
	}
	q.remove(items["x"]) // a level emptied
	q.remove(items["a0"])
	if l := items["a0"].links; items["a0"].fk != nil || l[0] != (itemLink{}) || l[1] != (itemLink{}) {
		t.Fatal("removed item still linked")
	}
	q.remove(items["b0"])
	q.remove(items["b1"]) // B leaves the ring
	if o := q.oldest(); o.entry.GetTaskId() != "c0" {
		t.Fatalf("oldest %s, want c0", o.entry.GetTaskId())
	}
	eqIDs(t, drain(q), "a1", "c0")
	if len(q.levels[2].keys) != 0 || len(q.levels[1].keys) != 0 {
		t.Fatal("empty keys kept")
	}
}

func TestFairQueueWaitsAtOrAbove(t *testing.T) {
	q := newFairQueue()
	q.push(fqItem("l", 4, "A"))
	for p, want := range map[int32]bool{1: false, 2: false, 0: false, 3: false, 4: true, 5: true} {
		if got := q.waitsAtOrAbove(p); got != want {
			t.Errorf("waitsAtOrAbove(%d) = %v with a priority 4 queued, want %v", p, got, want)
		}
	}
	q.push(fqItem("bad", 9, "")) // out of range: the default
	if !q.waitsAtOrAbove(3) || q.waitsAtOrAbove(2) {
		t.Error("an out-of-range priority is not queued as the default")
	}
}

// Pop is O(1) whatever the number of keys and items.
func BenchmarkFairQueue(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			q := newFairQueue()
			for i := range 100_000 {
				q.push(fqItem("x", int32(i%5+1), fmt.Sprint(i%keys)))
			}
			b.ResetTimer()
			for range b.N {
				it := q.pop()
				q.push(it)
			}
		})
	}
}

// A claim inside a write (reserveDirect) skips the queue only when nothing
// of its priority or a higher one waits: with a priority 4 step queued and
// an agent with room, a priority 1, 2 or default (3) step may take the
// agent at once; a priority 4 or 5 step queues behind it.
func TestReserveDirectByPriority(t *testing.T) {
	d := newDispatcher(dispatchDeps{id: "s", clock: clockwork.NewFakeClock(), claimConcurrency: 1, work: newWorkGroup()})
	for i := range d.flow.synced { // flow control read (no settings): a claim may proceed
		d.flow.synced[i] = true
	}
	conn := newAgentConn("session", &reevev1.Register{AgentId: "a", Namespace: "ns", StepTypes: []string{"t"}, MaxConcurrentSteps: 1}, 1<<20)
	d.agents.add(conn)
	k := queueKey{"ns", "t"}
	if sl := d.reserveDirect(k, 5); sl == nil {
		t.Fatal("nothing queued: no slot")
	} else {
		d.unreserve(sl)
	}
	it := fqItem("low", 4, "A")
	it.entry.Namespace, it.entry.Type = "ns", "t"
	d.lock()
	d.items[it.key] = it
	d.enqueue(it)
	d.unlock()
	for p, want := range map[int32]bool{1: true, 2: true, 0: true, 3: true, 4: false, 5: false} {
		sl := d.reserveDirect(k, p)
		if (sl != nil) != want {
			t.Errorf("priority %d with a priority 4 step queued: slot %v, want %v", p, sl != nil, want)
		}
		d.unreserve(sl)
	}
	if conn.reserved != 0 {
		t.Fatalf("reservations left: %d", conn.reserved)
	}
}

// Random pushes, pops and removals keep the queue's invariants: a pop
// takes the highest priority with items and the first item of its key; the
// oldest is the first pushed of those left; the lists' links and counts
// agree.
func TestFairQueueRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newFairQueue()
	var live []*readyItem // in push order
	drop := func(it *readyItem) {
		live = slices.DeleteFunc(live, func(x *readyItem) bool { return x == it })
	}
	for i := range 20_000 {
		switch op := rng.IntN(10); {
		case op < 5:
			it := fqItem(fmt.Sprint(i), int32(rng.IntN(6)), fmt.Sprint(rng.IntN(4)))
			q.push(it)
			live = append(live, it)
		case op < 8:
			it := q.pop()
			if it == nil {
				if len(live) != 0 {
					t.Fatalf("pop nil with %d queued", len(live))
				}
				continue
			}
			best := int32(9)
			for _, x := range live {
				best = min(best, workflowPriority(x))
			}
			if workflowPriority(it) != best {
				t.Fatalf("popped priority %d while %d was queued", workflowPriority(it), best)
			}
			for _, x := range live {
				if x.entry.GetFairnessKey() == it.entry.GetFairnessKey() && workflowPriority(x) == best {
					if x != it {
						t.Fatalf("popped %s before %s of the same key", it.key, x.key)
					}
					break
				}
			}
			drop(it)
		default:
			if len(live) > 0 {
				it := live[rng.IntN(len(live))]
				q.remove(it)
				drop(it)
			}
		}
		if q.Len() != len(live) || (len(live) > 0) != (q.oldest() != nil) || len(live) > 0 && q.oldest() != live[0] {
			t.Fatalf("step %d: len %d, want %d; oldest wrong", i, q.Len(), len(live))
		}
		n := 0
		for it := q.all.head; it != nil; it = it.links[linkAll].next {
			n++
		}
		if n != len(live) {
			t.Fatalf("step %d: the list of all holds %d, want %d", i, n, len(live))
		}
	}
}

func workflowPriority(it *readyItem) int32 { return int32(levelOf(it)) + 1 }

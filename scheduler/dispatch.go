package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// queueKey groups ready steps and agents: an agent takes the steps of its
// namespace whose (execution) type it registered.
type queueKey struct{ ns, typ string }

// readyItem is one ready-queue entry as this scheduler knows it.
type readyItem struct {
	key      string
	entry    *storev1.ReadyEntry
	fk       *fairKey    // its key's items while in its queue, due and not being claimed (fairqueue.go)
	links    [2]itemLink // in its key's items and its queue's list of all items
	due      time.Time
	queuedAt time.Time // when it last entered its queue (reeve.steps.queued.oldest_age)
	heapIdx  int       // in the delayed heap while not due; -1 otherwise
	claiming bool
	slot     flowSlot // the slots and rate token its claim takes (limits.go)
	parked   bool     // out of its queue, waiting for a slot of its concurrency key (limits.go)
}

// dispatcher matches ready steps with agents that have free capacity. Every
// scheduler sees the whole ready queue through an etcd watch; claims are
// etcd transactions, so when several schedulers race for a step one wins and
// the others drop it. It holds no reference to the Server: what it needs
// from it is in dispatchDeps.
type dispatcher struct {
	dispatchDeps
	events chan store.ReadyEvent
	wake   chan struct{}
	sem    chan struct{} // bounds claims in flight

	mu      sync.Mutex // guards what follows and every agentConn's counters
	items   map[string]*readyItem
	queues  map[queueKey]*fairQueue
	delayed delayHeap
	agents  agentSet
	seq     uint64       // the last agentConn.seq given
	flow    *flowControl // limits and pauses per type (limits.go)
	// taskKeys: workflow concurrency keys (taskkeys.go)
	taskKeys *taskKeys

	flowEvents chan store.FlowEvent
	flowKnown  chan struct{} // closed once flow control was read (awaitFlow)
	flowOnce   sync.Once
}

// dispatchDeps is what a dispatcher needs from its scheduler. Every field
// is set.
type dispatchDeps struct {
	id               string // this scheduler's id, recorded by claims
	clock            clockwork.Clock
	log              *slog.Logger
	logs             *logLimiter   // rate-limits the failures of claims
	store            *store.Store  // the ready queue's watch
	ackTimeout       time.Duration // see WithAckTimeout
	claimConcurrency int           // claims in flight at most, see WithClaimConcurrency

	// claimEntry writes the claim of a ready entry for agentID and returns
	// the assignment to send (Server.claim).
	claimEntry func(e *storev1.ReadyEntry, agentID string, slot flowSlot) (*reevev1.StepAssignment, error)
	// takeBackNow queues again an attempt agentID never got, and returns
	// once that write is done or given up (Server.takeBack).
	takeBackNow func(ref *reevev1.StepRef, agentID, reason string)
	// expireNow moves the complete-by of an attempt whose agent missed its
	// heartbeat to now (Server.expireNow).
	expireNow func(ref *reevev1.StepRef, details *structpb.Value)
	// admitTask gives a task waiting for a slot of its workflow's
	// concurrency key that slot (engine.admitKey).
	admitTask func(ns, id string, slot int32) error
	// adoptSlot records a max_running slot in a running attempt that
	// holds none (engine.adoptSlot, flowadopt.go).
	adoptSlot func(ref *reevev1.StepRef, typ string, slot int32) error
	// work is the background work the scheduler's shutdown waits for.
	work *workGroup
}

func newDispatcher(deps dispatchDeps) *dispatcher {
	return &dispatcher{
		dispatchDeps: deps,
		events:       make(chan store.ReadyEvent, 1024),
		wake:         make(chan struct{}, 1),
		sem:          make(chan struct{}, deps.claimConcurrency),
		items:        map[string]*readyItem{},
		queues:       map[queueKey]*fairQueue{},
		agents:       newAgentSet(),
		flow:         newFlowControl(),
		taskKeys:     newTaskKeys(),
		flowEvents:   make(chan store.FlowEvent, 1024),
		flowKnown:    make(chan struct{}),
	}
}

func (d *dispatcher) lock()   { d.mu.Lock() }
func (d *dispatcher) unlock() { d.mu.Unlock() }

// poke asks the loop to look for matches again.
func (d *dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run follows the ready queue and dispatches until ctx ends.
func (d *dispatcher) run(ctx context.Context) {
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		_ = d.store.WatchReady(ctx, d.events)
	}()
	defer func() { <-watchDone }()
	flowDone := make(chan struct{})
	go func() {
		defer close(flowDone)
		_ = d.store.WatchFlow(ctx, d.flowEvents)
	}()
	defer func() { <-flowDone }()

	clock := d.clock
	tick := clock.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var timer <-chan time.Time
		if next, ok := d.nextDue(); ok {
			timer = clock.After(next.Sub(clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case ev := <-d.events:
			d.apply(ev)
			// Apply whatever else is already there before matching.
			for drained := false; !drained; {
				select {
				case ev := <-d.events:
					d.apply(ev)
				default:
					drained = true
				}
			}
		case ev := <-d.flowEvents:
			d.applyFlow(ev)
		case <-d.wake:
		case <-timer:
		case <-tick.Chan():
			d.releaseExpired()
		}
		d.match()
	}
}

// apply records one ready-queue change.
func (d *dispatcher) apply(ev store.ReadyEvent) {
	d.lock()
	defer d.unlock()
	if ev.Reset {
		for key, it := range d.items {
			if !it.claiming {
				d.unlink(it)
				delete(d.items, key)
			}
		}
		return
	}
	if old, ok := d.items[ev.Key]; ok {
		if old.claiming && ev.Entry != nil && old.entry.GetAttempt() == ev.Entry.GetAttempt() {
			return
		}
		d.unlink(old)
		delete(d.items, ev.Key)
	}
	if ev.Entry == nil {
		return
	}
	it := &readyItem{key: ev.Key, entry: ev.Entry, heapIdx: -1}
	if nb := ev.Entry.GetNotBefore(); nb != nil {
		it.due = nb.AsTime()
	}
	d.items[ev.Key] = it
	d.enqueue(it)
}

// enqueue puts an item in its queue if due, else in the delayed heap.
func (d *dispatcher) enqueue(it *readyItem) {
	if it.due.After(d.clock.Now()) {
		heap.Push(&d.delayed, it)
		return
	}
	k := queueKey{it.entry.GetNamespace(), it.entry.GetType()}
	q := d.queues[k]
	if q == nil {
		q = newFairQueue()
		d.queues[k] = q
	}
	it.queuedAt = d.clock.Now()
	q.push(it)
}

func (d *dispatcher) unlink(it *readyItem) {
	d.flow.forget(it)
	if it.fk != nil {
		k := queueKey{it.entry.GetNamespace(), it.entry.GetType()}
		if q := d.queues[k]; q != nil {
			q.remove(it)
			if q.Len() == 0 {
				delete(d.queues, k)
			}
		}
	}
	if it.heapIdx >= 0 {
		heap.Remove(&d.delayed, it.heapIdx)
	}
}

func (d *dispatcher) nextDue() (time.Time, bool) {
	d.lock()
	defer d.unlock()
	next, ok := d.flow.wakeAt, !d.flow.wakeAt.IsZero() // a throttled type's next token
	if len(d.delayed) > 0 && (!ok || d.delayed[0].due.Before(next)) {
		next, ok = d.delayed[0].due, true
	}
	return next, ok
}

// match promotes due items and starts a claim for every queued item that an
// agent has room for.
func (d *dispatcher) match() {
	d.lock()
	defer d.unlock()
	now := d.clock.Now()
	for len(d.delayed) > 0 && !d.delayed[0].due.After(now) {
		d.enqueue(heap.Pop(&d.delayed).(*readyItem))
	}
	d.flow.wakeAt = time.Time{}
	for k, q := range d.queues {
		for q.Len() > 0 {
			conn := d.agents.pick(k, now)
			if conn == nil {
				break
			}
			select {
			case d.sem <- struct{}{}:
			default:
				return // claims saturated; a finishing claim pokes us
			}
			if front := q.peek(); d.flow.park(front) {
				// Its concurrency key is at its limit: it waits aside, and
				// the steps behind it go on.
				q.remove(front)
				<-d.sem
				continue
			}
			fs, ok := d.flow.take(k, now)
			if !ok {
				<-d.sem // paused, at its limit or throttled: a slot freed or a token due pokes us
				break
			}
			if !d.flow.takeKey(q.peek(), &fs) {
				d.flow.claimed(k, fs, false, now) // not reached: park found a free key slot
				<-d.sem
				break
			}
			it := q.pop() // by priority, fairly across keys
			it.claiming = true
			it.slot = fs
			conn.reserved++
			if !d.work.goOptional(func() { d.claim(it, conn) }) {
				// The scheduler is stopping: the item stays queued.
				<-d.sem
				conn.reserved--
				d.flow.claimed(k, fs, false, now)
				d.flow.claimedKey(fs, false)
				d.requeueParked(fs.key)
				it.claiming = false
				d.enqueue(it)
				return
			}
		}
		if q.Len() == 0 {
			delete(d.queues, k)
		}
	}
}

// claim runs the claim transaction for it on behalf of conn and sends the
// assignment when it wins. Whatever the claim's outcome, the step either
// reaches the agent's send queue or is taken back (queued again at once):
// never RUNNING locked to an agent that did not get it.
func (d *dispatcher) claim(it *readyItem, conn *agentConn) {
	defer func() { <-d.sem; d.poke() }()
	a, err := d.claimEntry(it.entry, conn.agentID, it.slot)
	ref := &reevev1.StepRef{Namespace: it.entry.GetNamespace(), TaskId: it.entry.GetTaskId(), Step: it.entry.GetStep(), Attempt: it.entry.GetAttempt()}
	if err != nil && !errors.Is(err, taskstate.ErrNotDue) && !isLostClaim(err) && !errors.Is(err, store.ErrSlotTaken) {
		// The outcome is unknown (the write may have committed after the
		// call gave up): take the attempt back if it did. Done here, in
		// the claim's slot, so that an etcd outage cannot pile them up.
		d.log.Warn("claim step", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "err", err)
		d.takeBackNow(ref, conn.agentID, "claim outcome unknown: "+err.Error())
	}

	d.lock()
	defer d.unlock()
	conn.reserved--
	d.flow.claimed(queueKey{it.entry.GetNamespace(), it.entry.GetType()}, it.slot, err == nil, d.clock.Now())
	d.flow.claimedKey(it.slot, err == nil)
	if err != nil && it.slot.key != "" {
		d.requeueParked(it.slot.key)
	}
	took := it.slot.slot
	it.slot = flowSlot{}
	switch {
	case err == nil:
		if cur := d.items[it.key]; cur == it {
			delete(d.items, it.key)
		}
		d.handOver(conn, a)
		d.adoptUnslotted(a, took) // a limit that came while it was claimed
	case errors.Is(err, taskstate.ErrNotDue), errors.Is(err, store.ErrSlotTaken):
		// A slot taken by another scheduler's claim: the watch shows it
		// soon, and the step waits for the next free one.
		it.claiming = false
		d.enqueue(it)
	case isLostClaim(err):
		// Another scheduler claimed it, or the step moved on: the watch
		// removes or replaces the entry.
		if cur := d.items[it.key]; cur == it {
			delete(d.items, it.key)
		}
	default:
		// Taken back above if it had committed; else try again shortly.
		d.logs.log(d.log, slog.LevelWarn, "claim step: "+errKind(err), "claim step", "task_id", it.entry.GetTaskId(), "step", it.entry.GetStep(), "attempt", it.entry.GetAttempt(), "err", err)
		if cur := d.items[it.key]; cur == it {
			it.claiming = false
			it.due = d.clock.Now().Add(200 * time.Millisecond)
			d.enqueue(it)
		}
	}
}

// takeBack queues again, in the background, an attempt dispatched to
// agentID that the agent never got or never acknowledged. It is an
// obligation of the work that claimed the attempt: it runs also while the
// scheduler stops (workGroup).
func (d *dispatcher) takeBack(ref *reevev1.StepRef, agentID, reason string) {
	if !d.work.goObligation(func() { d.takeBackNow(ref, agentID, reason) }) {
		d.log.Warn("scheduler stopped: the attempt is recovered at its complete-by", "task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", agentID, "reason", reason)
	}
}

func isLostClaim(err error) bool {
	return errors.Is(err, taskstate.ErrNotQueued) || errors.Is(err, taskstate.ErrPaused) || errors.Is(err, taskstate.ErrTerminal) ||
		errors.Is(err, taskstate.ErrUnknownStep) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrUnknownVersion) // a newer Reeve's record: its schedulers dispatch it
}

// stuckProbeInterval is how often an agent marked stuck gets one probe
// assignment.
const stuckProbeInterval = 30 * time.Second

// releaseExpired frees agent capacity held by attempts whose complete-by
// passed (by the protocol their agents have stopped working on them),
// expires attempts whose agent missed a heartbeat, and takes back
// assignments left unacknowledged past the ack timeout.
func (d *dispatcher) releaseExpired() {
	d.lock()
	now := d.clock.Now()
	if d.agents.releaseExpired(now) {
		d.poke()
	}
	missed := d.agents.missedBeats(now)
	late := d.agents.overdueAcks(now, d.ackTimeout, stuckProbeInterval)
	for _, o := range late {
		d.log.Warn("assignment not acknowledged in time: taking it back; the agent gets no more work until it acknowledges",
			"task_id", o.ref.GetTaskId(), "step", o.ref.GetStep(), "attempt", o.ref.GetAttempt(), "agent_id", o.conn.agentID, "ack_timeout", d.ackTimeout)
		// Should the agent read it after all, it must not run it.
		o.conn.enqueue(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Cancel{Cancel: &reevev1.CancelStep{Ref: o.ref, Reason: "not acknowledged in time"}}})
		d.takeBack(o.ref, o.conn.agentID, fmt.Sprintf("agent %s did not acknowledge the assignment within %s", o.conn.agentID, d.ackTimeout))
	}
	if len(late) > 0 {
		d.poke()
	}
	d.unlock()
	for _, b := range missed {
		d.work.goOptional(func() { d.expireNow(b.ref, b.details) })
	}
}

// delayHeap orders backing-off items by due time.
type delayHeap []*readyItem

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *delayHeap) Push(x any) {
	it := x.(*readyItem)
	it.heapIdx = len(*h)
	*h = append(*h, it)
}
func (h *delayHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	it.heapIdx = -1
	return it
}

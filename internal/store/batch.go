package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Group commit. Task writes (CreateTask, UpdateTask) from concurrent callers
// are committed together: one etcd transaction holds one nested transaction
// per task,
//
//	Txn().Then(
//	    OpTxn(If(mod_revision(task1) == seen, fences...), Then(put task1, index diff), Else(get task1)),
//	    OpTxn(If(create_revision(task2) == 0), Then(put task2, indexes), Else(get task2)),
//	    ...)
//
// so every task keeps its own compare and fences and gets its own success
// flag, while the batch costs one raft entry and one fsync. A batch holds at
// most one write per task (etcd refuses a transaction that writes a key
// twice), at most maxBatch writes, only as many as fit etcd's limit on
// operations per transaction (see txnops.go: the nested lists count against
// the outer one; a write that fits only alone is committed alone, one that
// never fits is refused with ErrTooManyOps on its own) and at most
// maxBatchBytes (etcd refuses requests over 1.5 MiB by default).
//
// Nothing waits to fill a batch: up to maxCommitters batches are in flight,
// and writes that arrive meanwhile form the next ones. An idle store
// therefore commits a lone write at once, in a plain transaction, and a busy
// one commits many writes per transaction.

const (
	defaultMaxBatch      = 64
	defaultMaxCommitters = 4
	maxBatchBytes        = 1 << 20
	// soloBytes: a write this large is committed on its own.
	soloBytes = 256 << 10
)

// writeReq is one task write waiting for its batch.
type writeReq struct {
	ctx      context.Context
	ns, id   string
	key      string
	create   *storev1.TaskRecord       // CreateTask: the new record
	absent   string                    // CreateTaskOfLatest: a key that must not exist (the workflow's next version)
	fn       func(*reevev1.Task) error // UpdateTask: the transition
	fences   []clientv3.Cmp            // UpdateTask: extra compares
	slots    []clientv3.Cmp            // set while committing: the max_running slots the write takes (queues.go)
	cur      *Versioned                // UpdateTask: the record fn applies to; nil to look it up
	cached   bool                      // cur came from the record cache
	current  bool                      // cur is known current: read linearizably, or returned by a failed compare
	fresh    bool                      // look cur up with a linearizable read
	tries    int                       // commits that lost a race
	queuedAt time.Time                 // when it was queued (the commit window counts from it)
	answered bool                      // its result was sent
	done     chan writeRes             // receives exactly one result
	next     *storev1.TaskRecord       // set while committing
	val      string                    // next, encoded
	ops      []clientv3.Op             // set while committing
	size     int                       // bytes of ops, roughly
}

type writeRes struct {
	before, after *storev1.TaskRecord
	created       bool
	err           error
}

// committer runs group commits. It has no goroutine of its own: a write
// starts a committer goroutine when fewer than maxCommitters run, and each
// one commits batches until the queue is empty.
type committer struct {
	s             *Store
	maxBatch      int
	maxCommitters int
	maxQueued     int // task creations are refused while this many writes wait

	mu sync.Mutex
	// Updates of existing tasks (claims, results, recovery) go before new
	// tasks: finishing work drains the system, starting work fills it.
	updates, creates []*writeReq
	inflight         map[string]bool // task keys in a batch being committed
	active           int             // committer goroutines running
	window           commitWindow    // the adaptive commit window (window.go)
}

func newCommitter(s *Store, maxBatch, maxCommitters, maxQueued int) *committer {
	return &committer{s: s, maxBatch: maxBatch, maxCommitters: maxCommitters, maxQueued: maxQueued, inflight: map[string]bool{}}
}

// do queues r and waits for its result or for r.ctx to end. When r.ctx
// ends first the write may still be committed, as with any etcd request
// whose caller gave up.
func (c *committer) do(r *writeReq) writeRes {
	r.done = make(chan writeRes, 1)
	c.mu.Lock()
	if n := len(c.updates) + len(c.creates); r.create != nil && c.maxQueued > 0 && n >= c.maxQueued {
		// Shed new work, finish old work: claims and results of existing
		// tasks still queue, since they are what drains the backlog.
		c.mu.Unlock()
		return writeRes{err: fmt.Errorf("create task: %d writes waiting for etcd: %w", n, ErrOverloaded)}
	}
	if r.create != nil {
		c.creates = append(c.creates, r)
	} else {
		c.updates = append(c.updates, r)
	}
	// A committer holding the window for company takes this write too,
	// unless it overslept (a loaded machine wakes it late).
	overdue := c.arrive(r)
	start := c.active < c.maxCommitters && (!c.window.holding || overdue)
	if start {
		c.active++
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case res := <-r.done:
		return res
	case <-r.ctx.Done():
		return writeRes{err: r.ctx.Err()}
	}
}

// run commits batches until there is nothing it may take.
func (c *committer) run() {
	for {
		c.mu.Lock()
		c.holdWindow()
		batch := c.take()
		if len(batch) == 0 {
			c.active--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		retry := c.commit(batch)
		c.mu.Lock()
		for _, r := range batch {
			delete(c.inflight, r.key)
		}
		// Writes that lost a race go first: they are the oldest. (Only
		// updates are retried.)
		c.updates = append(retry, c.updates...)
		c.mu.Unlock()
	}
}

// take removes up to maxBatch writes for distinct tasks that are not in
// flight from the queues, updates first, dropping those whose caller gave
// up. c.mu is held.
func (c *committer) take() []*writeReq {
	var batch []*writeReq
	c.updates, batch = c.takeFrom(c.updates, batch)
	c.creates, batch = c.takeFrom(c.creates, batch)
	return batch
}

func (c *committer) takeFrom(queue, batch []*writeReq) (rest, out []*writeReq) {
	rest = queue[:0]
	for i, r := range queue {
		switch {
		case len(batch) == c.maxBatch:
			rest = append(rest, queue[i:]...)
			clear(queue[len(rest):])
			return rest, batch
		case r.ctx.Err() != nil:
			r.done <- writeRes{err: r.ctx.Err()}
		case c.inflight[r.key]:
			rest = append(rest, r)
		default:
			c.inflight[r.key] = true
			batch = append(batch, r)
		}
	}
	clear(queue[len(rest):])
	return rest, batch
}

// commit commits one batch and answers its writes; it returns the writes
// that lost a race and must run again on the fresh record.
func (c *committer) commit(batch []*writeReq) (retry []*writeReq) {
	// The batch serves many callers: it has its own deadline, and a deadline
	// it runs out of means etcd is unavailable (etcdErr sees no caller's
	// context ending).
	// It ends with the etcd client too (Ctx is canceled by Close), so that a
	// batch in flight when its process shuts down does not linger.
	ctx, cancel := c.s.opCtx(c.s.c.Ctx())
	defer cancel()
	if err := c.s.resolve(ctx, batch); err != nil {
		for _, r := range batch {
			r.done <- writeRes{err: err}
		}
		return nil
	}
	// Apply the transitions; a write whose transition refuses is answered now.
	var ready []*writeReq
	for _, r := range batch {
		if r.answered {
			continue
		}
		if err := c.s.prepare(r); err != nil {
			if !r.current {
				// The transition refused a record that may be stale: a
				// cached one (another scheduler wrote since), or one read
				// serializably (etcd notifies watchers an instant before a
				// write is readable, and a member may lag the leader, so a
				// claim driven by the ready watch can read the record from
				// before the write that made the step ready). Judge it
				// again on a linearizable read.
				if r.cached {
					c.s.cache.drop(r.key)
				}
				r.cur, r.cached, r.fresh = nil, false, true
				retry = append(retry, r)
				continue
			}
			c.s.reportUnknown("update task", err)
			r.done <- writeRes{before: r.beforeRecord(), err: err}
			continue
		}
		if n := r.nops(); n > c.s.maxTxnOps {
			// It can never be committed; refuse it alone, not its batch.
			c.s.cache.drop(r.key)
			r.done <- writeRes{before: r.beforeRecord(), err: fmt.Errorf("write task %s/%s: needs %d operations in one transaction, etcd allows %d: %w", r.ns, r.id, n, c.s.maxTxnOps, ErrTooManyOps)}
			continue
		}
		ready = append(ready, r)
	}
	// Cut into transactions within etcd's limits.
	for len(ready) > 0 {
		n := c.s.fit(ready)
		retry = append(retry, c.s.commitTxn(ctx, ready[:n])...)
		ready = ready[n:]
	}
	return retry
}

// fit returns how many of the writes, from the first, one transaction can
// hold within etcd's request size and operation limits (at least one: a
// write that does not fit with others is committed alone). n nested
// transactions whose longest list holds m operations fit when n + m is at
// most the limit (see txnops.go).
func (s *Store) fit(ready []*writeReq) int {
	n, bytes, longest := 0, 0, 0
	for n < len(ready) {
		r := ready[n]
		if n > 0 && (bytes+r.size > maxBatchBytes || r.size >= soloBytes || ready[0].size >= soloBytes ||
			n+1+max(longest, r.nops()) > s.maxTxnOps) {
			break
		}
		bytes += r.size
		longest = max(longest, r.nops())
		n++
	}
	return n
}

func (r *writeReq) beforeRecord() *storev1.TaskRecord {
	if r.cur == nil {
		return nil
	}
	return r.cur.Record
}

// resolve finds the current record of every update that lacks one: from the
// record cache, else from one serializable read for the whole batch (a
// "not found" there is checked again with a linearizable read: the member
// may not have applied the creation yet).
func (s *Store) resolve(ctx context.Context, batch []*writeReq) error {
	var missing []*writeReq
	for _, r := range batch {
		if r.create != nil || r.cur != nil {
			continue
		}
		if v, ok := s.cache.get(r.key); ok && !r.fresh {
			r.cur, r.cached = &v, true
			continue
		}
		missing = append(missing, r)
	}
	for _, serializable := range []bool{true, false} {
		if len(missing) == 0 {
			return nil
		}
		var gets []clientv3.Op
		for _, r := range missing {
			if serializable && !r.fresh {
				gets = append(gets, clientv3.OpGet(r.key, clientv3.WithSerializable()))
			} else {
				gets = append(gets, clientv3.OpGet(r.key))
			}
		}
		resp, err := s.c.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return etcdErr(context.Background(), "get task", err)
		}
		var still []*writeReq
		for i, r := range missing {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				still = append(still, r)
				continue
			}
			v, err := unmarshalTask(kvs[0])
			if err != nil {
				return err
			}
			r.cur, r.current = &v, !serializable || r.fresh
		}
		missing = still
	}
	for _, r := range missing {
		r.done <- writeRes{err: notFound(KindTask, r.ns, r.id, "task %q in namespace %q", r.id, r.ns)}
		r.answered = true
	}
	return nil
}

// prepare computes the write's new record and operations.
func (s *Store) prepare(r *writeReq) error {
	if r.create != nil {
		val, err := marshal(r.create)
		if err != nil {
			return err
		}
		val = s.encodeRecordValue(val)
		r.next, r.val = r.create, val
		r.ops = append([]clientv3.Op{clientv3.OpPut(r.key, val)}, s.k.indexOps(nil, r.create)...)
		r.slots = s.k.slotCmps(nil, r.create.GetTask())
		r.size = len(val) + 512
		return nil
	}
	if v := r.cur.Record.GetRecordVersion(); !knownVersion(v) {
		// Written by a newer Reeve: never rewritten by this one.
		return &UnknownVersionError{Kind: KindTask, Namespace: r.ns, Name: r.id, Key: r.key, Version: v}
	}
	next := proto.Clone(r.cur.Record).(*storev1.TaskRecord)
	if err := r.fn(next.Task); err != nil {
		return err
	}
	s.markUnindexed(r.cur.Record, next)
	val, err := marshal(next)
	if err != nil {
		return err
	}
	if len(val) > MaxRecordBytes {
		// Text for people grew it past the limit: shorten that (fit.go)
		// rather than write a record etcd may refuse for ever.
		fit(next, MaxRecordBytes)
		if val, err = marshal(next); err != nil {
			return err
		}
	}
	val = s.encodeRecordValue(val)
	r.next, r.val = next, val
	r.ops = append([]clientv3.Op{clientv3.OpPut(r.key, val)}, s.k.indexOps(r.cur.Record, next)...)
	r.ops = append(r.ops, s.alertOps(r.cur.Record.GetTask(), next.GetTask(), r.cur.Revision)...)
	r.slots = s.k.slotCmps(r.cur.Record.GetTask(), next.GetTask())
	r.size = len(val) + 512
	return nil
}

func (r *writeReq) cmps() []clientv3.Cmp {
	if r.create != nil {
		if r.absent != "" {
			return append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0), clientv3.Compare(clientv3.CreateRevision(r.absent), "=", 0)}, r.slots...)
		}
		return append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)}, r.slots...)
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.key), "=", r.cur.Revision)}, r.fences...)
	return append(cmps, r.slots...)
}

// commitTxn commits writes in one etcd transaction: a plain one for a single
// write, nested ones for several.
func (s *Store) commitTxn(ctx context.Context, writes []*writeReq) (retry []*writeReq) {
	var (
		rev     int64
		results []*etcdserverpb.TxnResponse
		err     error
	)
	s.txns.Add(1)
	s.taskWrites.Add(int64(len(writes)))
	defer s.metrics.observe(ctx, len(writes), time.Now())
	if len(writes) == 1 {
		r := writes[0]
		var resp *clientv3.TxnResponse
		resp, err = s.c.Txn(ctx).If(r.cmps()...).Then(r.ops...).Else(clientv3.OpGet(r.key)).Commit()
		if err == nil {
			rev = resp.Header.Revision
			results = []*etcdserverpb.TxnResponse{(*etcdserverpb.TxnResponse)(resp)}
		}
	} else {
		nested := make([]clientv3.Op, len(writes))
		for i, r := range writes {
			nested[i] = clientv3.OpTxn(r.cmps(), r.ops, []clientv3.Op{clientv3.OpGet(r.key)})
		}
		var resp *clientv3.TxnResponse
		resp, err = s.c.Txn(ctx).Then(nested...).Commit()
		if err == nil {
			rev = resp.Header.Revision
			for _, op := range resp.Responses {
				results = append(results, op.GetResponseTxn())
			}
		}
	}
	if err != nil {
		err = etcdErr(context.Background(), "write task", err)
		if (errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooManyOps)) && len(writes) > 1 {
			// Find the one that does not fit: commit each on its own.
			for _, r := range writes {
				retry = append(retry, s.commitTxn(ctx, []*writeReq{r})...)
			}
			return retry
		}
		for _, r := range writes {
			s.cache.drop(r.key)
			r.done <- writeRes{err: err}
		}
		return nil
	}
	for i, r := range writes {
		if retry1 := s.settle(r, results[i], rev); retry1 {
			retry = append(retry, r)
		}
	}
	return retry
}

// settle answers one write from its (nested) transaction's response, or
// reports that it lost a race and must run again on the fresh record.
func (s *Store) settle(r *writeReq, resp *etcdserverpb.TxnResponse, rev int64) (retry bool) {
	if resp.GetSucceeded() {
		s.cache.put(r.key, rev, r.val, r.next)
		if r.create != nil {
			r.done <- writeRes{after: r.next, created: true}
			return false
		}
		r.done <- writeRes{before: r.cur.Record, after: r.next}
		return false
	}
	var kvs []*mvccpb.KeyValue
	if len(resp.GetResponses()) > 0 {
		kvs = resp.GetResponses()[0].GetResponseRange().GetKvs()
	}
	if r.create != nil {
		if len(kvs) == 0 && r.absent != "" {
			// The task does not exist: the workflow compare failed.
			r.done <- writeRes{err: fmt.Errorf("create task %s/%s: %w", r.ns, r.id, ErrStaleWorkflow)}
			return false
		}
		if len(kvs) == 0 {
			r.done <- writeRes{err: fmt.Errorf("create task: %w", ErrConflict)}
			return false
		}
		old, err := unmarshalTask(kvs[0])
		if err != nil {
			r.done <- writeRes{err: err}
			return false
		}
		s.cache.put(r.key, old.Revision, string(kvs[0].Value), old.Record)
		r.done <- writeRes{after: old.Record}
		return false
	}
	if len(kvs) == 0 {
		s.cache.drop(r.key)
		r.done <- writeRes{err: notFound(KindTask, r.ns, r.id, "task %q in namespace %q", r.id, r.ns)}
		return false
	}
	if kvs[0].ModRevision == r.cur.Revision && len(r.slots) > 0 && len(r.fences) == 0 {
		// Only the slot compares can have failed.
		r.done <- writeRes{err: fmt.Errorf("update task %s/%s: %w", r.ns, r.id, ErrSlotTaken)}
		return false
	}
	if kvs[0].ModRevision == r.cur.Revision {
		r.done <- writeRes{err: fmt.Errorf("update task %s/%s: %w", r.ns, r.id, ErrFenced)}
		return false
	}
	fresh, err := unmarshalTask(kvs[0])
	if err != nil {
		r.done <- writeRes{err: err}
		return false
	}
	s.metrics.lostCompare(r.cached)
	s.cache.put(r.key, fresh.Revision, string(kvs[0].Value), fresh.Record)
	r.tries++
	if r.tries >= maxUpdateRetries {
		r.done <- writeRes{err: fmt.Errorf("update task %s/%s: %w", r.ns, r.id, ErrConflict)}
		return false
	}
	r.cur, r.cached, r.current = &fresh, false, true
	r.next, r.ops, r.val = nil, nil, ""
	return true
}

// recordCache keeps the last record this store wrote or read for live
// tasks, encoded, with its mod revision, so that the next update of a task
// needs no read: the update's compare on the mod revision catches a stale
// entry, and its Else branch returns the fresh record. Terminal tasks are
// not kept. Entries are the encoded records (about 1.5 KB for a one-step
// task, several times less than the decoded message), so 10,000 cost about
// 15-30 MB.
type recordCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]cachedRecord
	order []string // insertion order, for eviction; may hold dropped keys
}

type cachedRecord struct {
	val string
	rev int64
}

// CachedTask returns the record of a live task as this store last wrote or
// read it, without asking etcd, or false when it has none (another
// scheduler wrote it since, it ended, or it was evicted). The record may be
// older than etcd's: for answers that any recent version serves.
func (s *Store) CachedTask(ns, id string) (*storev1.TaskRecord, bool) {
	v, ok := s.cache.get(s.k.task(ns, id))
	return v.Record, ok
}

func newRecordCache(max int) *recordCache {
	return &recordCache{max: max, m: map[string]cachedRecord{}}
}

// get returns a fresh decoded copy of the cached record.
func (c *recordCache) get(key string) (Versioned, bool) {
	if c.max <= 0 {
		return Versioned{}, false
	}
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return Versioned{}, false
	}
	rec := &storev1.TaskRecord{}
	// Decoding copies what it keeps (bytes and strings), so the cached
	// string (the record as stored, plain or compressed) is read in place
	// rather than copied to a []byte first.
	if err := UnmarshalRecord(unsafe.Slice(unsafe.StringData(e.val), len(e.val)), rec); err != nil {
		return Versioned{}, false
	}
	return Versioned{Record: rec, Revision: e.rev}, true
}

// put records val (the encoding of rec) at revision rev, unless a newer
// revision is cached; a terminal record removes the entry.
func (c *recordCache) put(key string, rev int64, val string, rec *storev1.TaskRecord) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[key]
	if ok && old.rev >= rev {
		return
	}
	if taskstate.TerminalTask(rec.GetTask().GetState()) {
		delete(c.m, key)
		return
	}
	c.m[key] = cachedRecord{val: val, rev: rev}
	if ok {
		return
	}
	// Every key of m is in order (which may also hold dropped keys).
	c.order = append(c.order, key)
	for len(c.m) > c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 2*c.max+64 {
		c.order = c.order[:0:0]
		for k := range c.m {
			c.order = append(c.order, k)
		}
	}
}

func (c *recordCache) drop(key string) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

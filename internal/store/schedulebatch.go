package store

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Group commit of schedule records. A firing of many schedules at once (the
// supervisor leader's FireSchedules) writes one record per schedule, each
// in a transaction that compares the record's mod revision and the
// leader's fence. Written one transaction each, 10,000 schedules due in the
// same second cost 10,000 etcd requests and raft entries; so concurrent
// writes of schedule records are committed together, as task writes are
// (batch.go): one etcd transaction holds one nested transaction per
// schedule,
//
//	Txn().Then(
//	    OpTxn(If(mod_revision(sched1) == seen, fence), Then(put sched1, due key moved), Else(get sched1 keys only)),
//	    OpTxn(If(mod_revision(sched2) == seen, fence), Then(...), Else(...)),
//	    ...)
//
// so every record keeps its own compare and the fence it was written under
// (a deposed leader's writes fail each on its own fence: nothing it
// batches is written), and gets its own outcome: written; its record
// changed since it was read (the caller reads it again and repeats, as
// after a lost compare of a lone write); or the fence failed (the record's
// revision is the one it compared, so the fence is what failed). A batch
// is one etcd transaction, so it is written whole or not at all: an etcd
// failure mid-batch leaves every record as it was, and each caller gets the
// error, as it would for its own transaction.
//
// Nothing waits to fill a batch: up to maxScheduleCommitters batches are
// in flight, and writes that arrive meanwhile form the next ones, so a lone
// write (an admin's pause) is committed at once, in a plain transaction as
// before. A batch holds at most one write per schedule (etcd refuses a
// transaction that writes a key twice; a second write of a schedule in
// flight waits for the next batch), at most maxScheduleBatch writes, and
// only as many as fit etcd's operation and size limits (txnops.go).

const (
	maxScheduleBatch      = 64
	maxScheduleCommitters = 4
)

// scheduleWrite is one schedule record write waiting for its batch.
type scheduleWrite struct {
	ctx   context.Context
	key   string
	rev   int64        // the record's mod revision the write compares
	fence clientv3.Cmp // the leader's fence; zero for none
	ops   []clientv3.Op
	size  int // bytes of ops, roughly
	done  chan scheduleWriteRes
}

// scheduleWriteRes is guardedTxn's answer for one write: ok false means the
// record's compare failed, fenced true that the fence did.
type scheduleWriteRes struct {
	fenced, ok bool
	err        error
}

// scheduleCommitter runs the group commits of schedule records. Like the
// task committer it has no goroutine of its own: a write starts one when
// fewer than maxScheduleCommitters run, and each commits batches until the
// queue is empty.
type scheduleCommitter struct {
	s *Store

	mu       sync.Mutex
	queue    []*scheduleWrite
	inflight map[string]bool // record keys in a batch being committed
	active   int
}

func newScheduleCommitter(s *Store) *scheduleCommitter {
	return &scheduleCommitter{s: s, inflight: map[string]bool{}}
}

// writeSchedule commits ops if the record at key still has mod revision
// rev and, when set, fence holds, in a batch with other schedule writes
// (above). When ctx ends first the write may still be committed, as with
// any etcd request whose caller gave up.
func (s *Store) writeSchedule(ctx context.Context, key string, rev int64, fence clientv3.Cmp, ops []clientv3.Op) (fenced, ok bool, err error) {
	w := &scheduleWrite{ctx: ctx, key: key, rev: rev, fence: fence, ops: ops, size: opsSize(ops), done: make(chan scheduleWriteRes, 1)}
	c := s.schedCommits
	c.mu.Lock()
	c.queue = append(c.queue, w)
	start := c.active < maxScheduleCommitters
	if start {
		c.active++
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case res := <-w.done:
		return res.fenced, res.ok, res.err
	case <-ctx.Done():
		return false, false, etcdErr(ctx, "update schedule", ctx.Err())
	}
}

// opsSize is roughly the bytes of a write's operations.
func opsSize(ops []clientv3.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes()) + 16
	}
	return n
}

// run commits batches until the queue holds nothing it may take.
func (c *scheduleCommitter) run() {
	for {
		c.mu.Lock()
		batch := c.take()
		if len(batch) == 0 {
			c.active--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.s.commitSchedules(batch)
		c.mu.Lock()
		for _, w := range batch {
			delete(c.inflight, w.key)
		}
		c.mu.Unlock()
	}
}

// take removes, oldest first, up to maxScheduleBatch writes of distinct
// schedules not in flight that fit one transaction, answering those whose
// caller gave up. c.mu is held.
func (c *scheduleCommitter) take() []*scheduleWrite {
	var (
		batch        []*scheduleWrite
		bytes, worst int
	)
	rest := c.queue[:0]
	for i, w := range c.queue {
		if w.ctx.Err() != nil {
			w.done <- scheduleWriteRes{err: etcdErr(w.ctx, "update schedule", w.ctx.Err())}
			continue
		}
		if c.inflight[w.key] {
			rest = append(rest, w)
			continue
		}
		n := scheduleWriteOps(w)
		if len(batch) > 0 && (len(batch) == maxScheduleBatch || bytes+w.size > maxBatchBytes ||
			len(batch)+1+max(worst, n) > c.s.maxTxnOps) {
			rest = append(rest, c.queue[i:]...)
			break
		}
		c.inflight[w.key] = true
		batch = append(batch, w)
		bytes, worst = bytes+w.size, max(worst, n)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return batch
}

// scheduleWriteOps is the longest list of a write's nested transaction:
// If (the record's compare and the fence), Then (its operations), Else
// (one read).
func scheduleWriteOps(w *scheduleWrite) int {
	n := max(len(w.ops), 1)
	if w.fence != (clientv3.Cmp{}) {
		n = max(n, 2)
	}
	return n
}

// commitSchedules commits one batch and answers each of its writes: a
// lone write in a plain transaction (guardedTxn), several in one
// transaction of nested ones.
func (s *Store) commitSchedules(batch []*scheduleWrite) {
	// The batch serves many callers: it has its own deadline (and ends
	// with the etcd client), as the task committer's batches do.
	ctx, cancel := s.opCtx(s.c.Ctx())
	defer cancel()
	if len(batch) == 1 {
		w := batch[0]
		fenced, ok, err := s.guardedTxn(ctx, "update schedule", clientv3.Compare(clientv3.ModRevision(w.key), "=", w.rev), w.fence, w.ops)
		w.done <- scheduleWriteRes{fenced: fenced, ok: ok, err: err}
		return
	}
	s.scheduleTxns.Add(1)
	nested := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(w.key), "=", w.rev)}
		if w.fence != (clientv3.Cmp{}) {
			cmps = append(cmps, w.fence)
		}
		nested[i] = clientv3.OpTxn(cmps, w.ops, []clientv3.Op{clientv3.OpGet(w.key, clientv3.WithKeysOnly())})
	}
	resp, err := s.c.Txn(ctx).Then(nested...).Commit()
	if err != nil {
		err = etcdErr(context.Background(), "update schedules", err)
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooManyOps) {
			// Find the one that does not fit: commit each on its own.
			for _, w := range batch {
				s.commitSchedules([]*scheduleWrite{w})
			}
			return
		}
		for _, w := range batch {
			w.done <- scheduleWriteRes{err: err}
		}
		return
	}
	for i, w := range batch {
		w.done <- settleSchedule(w, resp.Responses[i].GetResponseTxn())
	}
}

// settleSchedule is one write's outcome from its nested transaction's
// response: written; or not, and then the fence failed when the record
// still has the revision the write compared (so its own compare held),
// else the record changed (or went) since it was read.
func settleSchedule(w *scheduleWrite, r *etcdserverpb.TxnResponse) scheduleWriteRes {
	if r.GetSucceeded() {
		return scheduleWriteRes{ok: true}
	}
	if w.fence != (clientv3.Cmp{}) && len(r.GetResponses()) > 0 {
		if kvs := r.GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].ModRevision == w.rev {
			return scheduleWriteRes{fenced: true}
		}
	}
	return scheduleWriteRes{}
}

package store

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// SweepEndedFrom deletes up to limit tasks that ended at or before
// `before`, and the alerts raised by then: SweepEnded without archiving.
func (s *Store) SweepEndedFrom(ctx context.Context, from string, before time.Time, limit int) (deleted int, next string, more bool, err error) {
	return s.SweepEnded(ctx, Sweep{From: from, Before: before, Limit: limit, AlertsBefore: before})
}

// Sweep is one call of SweepEnded.
type Sweep struct {
	// From is where the pass starts in the ended index ("" for its start):
	// the next of the previous call.
	From string
	// Before: tasks that ended at or before it are deleted.
	Before time.Time
	// Limit is the most ended keys examined.
	Limit int
	// Skip, when set, leaves the tasks whose state it returns true for,
	// told from their ended key alone (their records are not read). Their
	// keys are examined, and the cursor passes them.
	Skip func(reevev1.TaskState) bool
	// Stay, when set, leaves the tasks whose record it returns true for:
	// Skip for what the state alone does not tell (the records of the
	// tasks Skip let through are read anyway).
	Stay func(*reevev1.Task) bool
	// Keep, when set, is given the records of the tasks about to be
	// deleted, before any is deleted; when it returns an error nothing is
	// deleted and SweepEnded returns that error. The archive writes them.
	Keep func(ctx context.Context, recs []*storev1.TaskRecord) error
	// AlertsBefore, when set, also deletes the alerts raised at or before
	// it in the namespaces of the tasks examined.
	AlertsBefore time.Time
}

// SweepEnded deletes up to sw.Limit tasks that ended at or before
// sw.Before, with every key derived from their records (see indexKeys:
// created, ended, and any ready or deadline key a record still implies), in
// one transaction per task guarded by its ended key's and its record's
// revisions, so a task revived or changed meanwhile is left alone (and, when
// it was given to sw.Keep, kept again by a later sweep). A record of a
// version this Reeve does not know is left alone too, and reported
// (versions.go). Deletions are
// grouped, up to sweepBatch tasks per etcd transaction within etcd's
// operation limit. It returns how many tasks it deleted.
//
// It examines the ended keys from sw.From on and returns where the next
// call should start (after the last ended key it examined, or sw.From when
// it examined none) and whether the range held more than sw.Limit keys.
//
// The cursor is what keeps a sweep's cost proportional to what it deletes:
// etcd counts every key of a range, and keeps the keys a sweep deleted in
// its index (as tombstones) until the next compaction, so a sweep that
// always ranged from the start of the index would walk every task deleted
// since the last compaction, and the whole backlog, on every call.
func (s *Store) SweepEnded(ctx context.Context, sw Sweep) (deleted int, next string, more bool, err error) {
	from, before, limit := sw.From, sw.Before, sw.Limit
	// Each etcd call has its own op timeout, and Keep none of the store's:
	// a call of the whole pass under one timeout ran out under load after
	// the archive write and before the deletes.
	prefix := s.k.endedPrefix()
	start := max(from, prefix)
	octx, cancel := s.opCtx(ctx)
	resp, err := s.c.Get(octx, start, clientv3.WithRange(s.k.endedUntil(before)), clientv3.WithLimit(int64(limit)))
	cancel()
	if err != nil {
		return 0, from, false, etcdErr(ctx, "sweep ended", err)
	}
	next, more = from, resp.More
	if n := len(resp.Kvs); n > 0 {
		next = string(resp.Kvs[n-1].Key) + "\x00"
	}
	type victim struct {
		ns, id string
		ended  *mvccpb.KeyValue
		rec    *Versioned
		ops    []clientv3.Op
	}
	var victims []*victim
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 3 {
			continue
		}
		if sw.Skip != nil && sw.Skip(endedState(string(kv.Value))) {
			continue
		}
		victims = append(victims, &victim{ns: parts[1], id: parts[2], ended: kv})
	}
	// Read the records, at most sweepBatch per transaction.
	for start := 0; start < len(victims); start += sweepBatch {
		part := victims[start:min(start+sweepBatch, len(victims))]
		gets := make([]clientv3.Op, len(part))
		for i, v := range part {
			gets[i] = clientv3.OpGet(s.k.task(v.ns, v.id))
		}
		octx, cancel := s.opCtx(ctx)
		r, err := s.c.Txn(octx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return 0, from, false, etcdErr(ctx, "sweep ended", err)
		}
		for i, v := range part {
			if kvs := r.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
				rec, err := unmarshalTask(kvs[0])
				if err != nil {
					return 0, from, false, err
				}
				v.rec = &rec
			}
		}
	}
	// A record of a version this Reeve does not know is neither kept nor
	// deleted (versions.go); a newer Reeve's sweep moves it.
	known := victims[:0]
	for _, v := range victims {
		if v.rec != nil && !knownVersion(v.rec.Record.GetRecordVersion()) {
			s.unknownVersion("sweep ended tasks", &UnknownVersionError{Kind: KindTask, Namespace: v.ns, Name: v.id,
				Key: s.k.task(v.ns, v.id), Version: v.rec.Record.GetRecordVersion()})
			continue
		}
		known = append(known, v)
	}
	victims = known
	if sw.Stay != nil {
		left := victims[:0]
		for _, v := range victims {
			if v.rec == nil || !sw.Stay(v.rec.Record.GetTask()) {
				left = append(left, v)
			}
		}
		victims = left
	}
	if sw.Keep != nil {
		// A record that is not terminal (an inconsistency: its ended
		// key should have gone with its revival) is neither kept nor
		// deleted.
		var recs []*storev1.TaskRecord
		kept := victims[:0]
		for _, v := range victims {
			switch {
			case v.rec == nil:
				kept = append(kept, v) // a leftover ended key: nothing to keep
			case taskstate.TerminalTask(v.rec.Record.GetTask().GetState()):
				recs = append(recs, v.rec.Record)
				kept = append(kept, v)
			}
		}
		victims = kept
		if len(recs) > 0 {
			if err := sw.Keep(ctx, recs); err != nil {
				return 0, from, false, err
			}
		}
	}
	for _, v := range victims {
		// Exactly the keys the record implies (indexes are derived: no
		// other key of the task exists), each delete an etcd operation of
		// its own. A leftover ended key without a record may have ready
		// keys left behind: those go in one range delete.
		del := map[string]bool{s.k.task(v.ns, v.id): true, string(v.ended.Key): true}
		v.ops = nil
		if v.rec != nil {
			for key := range s.k.indexKeys(v.rec.Record) {
				del[key] = true
			}
		} else {
			v.ops = append(v.ops, clientv3.OpDelete(s.k.ready(v.ns, v.id, ""), clientv3.WithPrefix()))
		}
		for _, key := range slices.Sorted(maps.Keys(del)) {
			v.ops = append(v.ops, clientv3.OpDelete(key))
		}
	}
	var (
		batch   []*victim
		longest int
		seen    = map[string]bool{} // a task id reused after a sweep may have two ended keys
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		txns := make([]clientv3.Op, len(batch))
		for i, v := range batch {
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(v.ended.Key)), "=", v.ended.ModRevision)}
			if v.rec != nil {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k.task(v.ns, v.id)), "=", v.rec.Revision))
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.k.task(v.ns, v.id)), "=", 0))
			}
			txns[i] = clientv3.OpTxn(cmps, v.ops, nil)
		}
		octx, cancel := s.opCtx(ctx)
		r, err := s.c.Txn(octx).Then(txns...).Commit()
		cancel()
		if err != nil {
			return etcdErr(ctx, "sweep ended", err)
		}
		for i, op := range r.Responses {
			if op.GetResponseTxn().GetSucceeded() {
				deleted++
				s.cache.drop(s.k.task(batch[i].ns, batch[i].id))
			}
		}
		batch, longest = batch[:0], 0
		clear(seen)
		return nil
	}
	for _, v := range victims {
		key := s.k.task(v.ns, v.id)
		if seen[key] || len(batch) == sweepBatch || len(batch)+1+max(longest, len(v.ops)) > s.maxTxnOps {
			if err := flush(); err != nil {
				return deleted, from, false, err
			}
		}
		if 1+len(v.ops) > s.maxTxnOps {
			continue // cannot be deleted in one transaction; left for an operator (reeve verify reports it)
		}
		seen[key] = true
		batch = append(batch, v)
		longest = max(longest, len(v.ops))
	}
	if err := flush(); err != nil {
		return deleted, from, false, err
	}
	if sw.AlertsBefore.IsZero() {
		return deleted, next, more, nil
	}
	nss := map[string]bool{}
	for _, v := range victims {
		nss[v.ns] = true
	}
	if err := s.SweepAlerts(ctx, slices.Sorted(maps.Keys(nss)), sw.AlertsBefore); err != nil {
		return deleted, from, false, err
	}
	return deleted, next, more, nil
}

// SweepAlerts deletes the alerts of namespaces nss raised at or before
// `before` (see sweepAlerts).
func (s *Store) SweepAlerts(ctx context.Context, nss []string, before time.Time) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	return s.sweepAlerts(octx, nss, before)
}

// sweepAlerts deletes the alerts of namespaces nss raised at or before
// `before`: an alert lives as long as the task it is about, which the
// retention sweep deletes `retention` after it ended, and an alert is
// raised when its task ends FAILED. Alert keys start with their time
// (alertOps), so this is one range delete per namespace. A namespace's old
// alerts go when a sweep meets one of its ended tasks, which every alert's
// own task is.
func (s *Store) sweepAlerts(ctx context.Context, nss []string, before time.Time) error {
	if len(nss) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, len(nss))
	for i, ns := range nss {
		ops[i] = clientv3.OpDelete(s.k.alerts(ns), clientv3.WithRange(s.k.alertsUntil(ns, before)))
	}
	for start := 0; start < len(ops); start += s.maxTxnOps {
		if _, err := s.c.Txn(ctx).Then(ops[start:min(start+s.maxTxnOps, len(ops))]...).Commit(); err != nil {
			return etcdErr(ctx, "sweep alerts", err)
		}
	}
	return nil
}

// sweepBatch is how many tasks one sweep transaction deletes.
const sweepBatch = 64

// Revision returns etcd's current revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.endedPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, etcdErr(ctx, "revision", err)
	}
	return resp.Header.Revision, nil
}

// WatchEnded calls fn for every task that reaches a terminal state after
// revision rev, with its namespace, id and state name, until ctx ends. For
// benchmarks and tools; it does not resume across a compaction.
func (s *Store) WatchEnded(ctx context.Context, rev int64, fn func(ns, id, state string)) error {
	prefix := s.k.endedPrefix()
	for wr := range s.c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			parts := strings.Split(strings.TrimPrefix(string(ev.Kv.Key), prefix), "/")
			if len(parts) == 3 {
				fn(parts[1], parts[2], endedState(string(ev.Kv.Value)).String())
			}
		}
	}
	return ctx.Err()
}

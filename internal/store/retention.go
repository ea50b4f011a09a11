package store

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SweepEnded deletes up to limit tasks that ended at or before `before`,
// with their index keys. A task revived meanwhile (its ended key changed) is
// left alone. Deletions are grouped, up to 64 tasks per etcd transaction,
// each guarded by its own ended key's revision. It returns how many tasks it
// deleted.
func (s *Store) SweepEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.k.endedPrefix()
	resp, err := s.c.Get(octx, prefix, clientv3.WithRange(s.k.endedUntil(before)), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return 0, etcdErr(ctx, "sweep ended", err)
	}
	var (
		deleted int
		batch   []clientv3.Op
		taskKey []string
		seen    = map[string]bool{} // a task id reused after a sweep may have two ended keys
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := s.c.Txn(octx).Then(batch...).Commit()
		if err != nil {
			return etcdErr(ctx, "sweep ended", err)
		}
		for i, op := range r.Responses {
			if op.GetResponseTxn().GetSucceeded() {
				deleted++
				s.cache.drop(taskKey[i])
			}
		}
		batch, taskKey = batch[:0], taskKey[:0]
		clear(seen)
		return nil
	}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 3 {
			continue
		}
		ns, id, state := parts[1], parts[2], string(kv.Value)
		if seen[s.k.task(ns, id)] || len(batch) == sweepBatch {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
		seen[s.k.task(ns, id)] = true
		taskKey = append(taskKey, s.k.task(ns, id))
		batch = append(batch, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpDelete(s.k.task(ns, id)), clientv3.OpDelete(s.k.stateOf(ns, state) + id), clientv3.OpDelete(string(kv.Key))},
			nil))
	}
	return deleted, flush()
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
				fn(parts[1], parts[2], string(ev.Kv.Value))
			}
		}
	}
	return ctx.Err()
}

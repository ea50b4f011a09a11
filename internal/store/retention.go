package store

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SweepEnded deletes up to limit tasks that ended at or before `before`,
// with their index keys. A task revived meanwhile (its ended key changed) is
// left alone. It returns how many tasks it deleted.
func (s *Store) SweepEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.k.endedPrefix()
	resp, err := s.c.Get(octx, prefix, clientv3.WithRange(s.k.endedUntil(before)), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return 0, etcdErr(ctx, "sweep ended", err)
	}
	deleted := 0
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 3 {
			continue
		}
		ns, id, state := parts[1], parts[2], string(kv.Value)
		r, err := s.c.Txn(octx).
			If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(s.k.task(ns, id)), clientv3.OpDelete(s.k.stateOf(ns, state)+id), clientv3.OpDelete(string(kv.Key))).
			Commit()
		if err != nil {
			return deleted, etcdErr(ctx, "sweep ended", err)
		}
		if r.Succeeded {
			deleted++
		}
	}
	return deleted, nil
}

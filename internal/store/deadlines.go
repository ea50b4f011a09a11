package store

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ExpiredDeadlines returns up to limit executions (dispatched or queued) whose
// deadline is at or before now, earliest first. It reads only the expired
// part of the deadline index (keys only), so its cost is proportional to what
// expired, not to the number of tasks.
func (s *Store) ExpiredDeadlines(ctx context.Context, now time.Time, limit int) ([]Deadline, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.deadlinePrefix(), clientv3.WithRange(s.k.deadlinesUntil(now)),
		clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, etcdErr(ctx, "expired deadlines", err)
	}
	out := make([]Deadline, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d, err := s.k.parseDeadline(string(kv.Key))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

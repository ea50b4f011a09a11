package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
)

// PutAgent records a connected agent under lease (the scheduler's session
// lease), so the record disappears with the scheduler. It returns the
// record's revision, for DeleteAgent.
func (s *Store) PutAgent(ctx context.Context, rec *storev1.AgentRecord, lease clientv3.LeaseID) (int64, error) {
	val, err := marshal(rec)
	if err != nil {
		return 0, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Put(octx, s.k.agent(rec.GetNamespace(), rec.GetAgentId()), val, clientv3.WithLease(lease))
	if err != nil {
		return 0, etcdErr(ctx, "put agent", err)
	}
	return resp.Header.Revision, nil
}

// DeleteAgent removes an agent record unless a newer connection of the same
// agent replaced it since revision rev.
func (s *Store) DeleteAgent(ctx context.Context, ns, id string, rev int64) error {
	key := s.k.agent(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	return etcdErr(ctx, "delete agent", err)
}

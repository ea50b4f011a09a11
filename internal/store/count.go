package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// CountActive returns how many tasks of namespace ns are not terminal, from
// the created-state index in one read (count-only ranges: etcd walks the index keys
// in memory and returns no values). Its cost grows with the count, so
// callers cache it rather than calling it per request.
func (s *Store) CountActive(ctx context.Context, ns string) (int64, error) {
	var ops []clientv3.Op
	for _, st := range taskStates {
		if taskstate.TerminalTask(st) {
			continue
		}
		ops = append(ops, clientv3.OpGet(s.k.createdOf(ns, "", st.String()), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return 0, etcdErr(ctx, "count active tasks", err)
	}
	var n int64
	for _, r := range resp.Responses {
		n += r.GetResponseRange().GetCount()
	}
	return n, nil
}

// CountTasks counts the tasks of a namespace in one state through the
// created-state index (a count-only range: etcd walks the index keys of that
// state only).
func (s *Store) CountTasks(ctx context.Context, ns string, state reevev1.TaskState) (int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.k.createdOf(ns, "", state.String())
	resp, err := s.c.Get(octx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		return 0, etcdErr(ctx, "count tasks", err)
	}
	return resp.Count, nil
}

// CountLive returns how many executions are queued (ready keys) and how many
// have a deadline (dispatched ones, and queued ones with a schedule-to-start
// timeout; a dispatched one holding a max_running slot has its deadline in
// the slot key, and is counted by it: slotdeadlines.go), cluster-wide, in
// one read of three count-only ranges, and the
// store revision it counted at. Those indexes hold live work only, never
// retained terminal tasks, so the cost grows with the work in flight, not
// with the store (but etcd visits every key of a range it counts: a caller
// that counts again skips the count while the revision has not moved).
func (s *Store) CountLive(ctx context.Context) (ready, deadlines, rev int64, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).Then(
		clientv3.OpGet(s.k.readyPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.k.deadlinePrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.k.slotsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return 0, 0, 0, etcdErr(ctx, "count live work", err)
	}
	deadlines = resp.Responses[1].GetResponseRange().GetCount() + resp.Responses[2].GetResponseRange().GetCount()
	return resp.Responses[0].GetResponseRange().GetCount(), deadlines, resp.Header.GetRevision(), nil
}

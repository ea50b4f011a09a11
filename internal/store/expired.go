package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// The supervisor's view of the deadline index: pages of expired keys, the
// records behind them read in batches, orphan keys pruned, the head of the
// index, and a watch that tells when an earlier deadline appears.

// Expired is one key of the deadline index with the revision it was read at.
type Expired struct {
	Deadline
	Key      string
	Revision int64
	// slotValue is the value of a slot key holding the deadline
	// (slotdeadlines.go); "" for a deadlines/ key.
	slotValue string
}

// readChunk bounds the operations of one batched read or prune (etcd allows
// 128 per transaction level by default).
const readChunk = 100

// ExpiredAfter returns up to limit expired deadline keys (deadline at or
// before now) after the key `after` ("" for the front of the index),
// earliest first, keys only.
func (s *Store) ExpiredAfter(ctx context.Context, after string, now time.Time, limit int) ([]Expired, error) {
	from := s.k.deadlinePrefix()
	if after != "" {
		from = after + "\x00"
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, from, clientv3.WithRange(s.k.deadlinesUntil(now)),
		clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)), clientv3.WithSerializable())
	if err != nil {
		return nil, etcdErr(ctx, "expired deadlines", err)
	}
	out := make([]Expired, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d, err := s.k.parseDeadline(string(kv.Key))
		if err != nil {
			return nil, err
		}
		out = append(out, Expired{Deadline: d, Key: string(kv.Key), Revision: kv.ModRevision})
	}
	return out, nil
}

// NextDeadline returns the earliest deadline in the index after now and
// before until (the zero time: no bound), and the revision the index was
// read at (to resume a watch from). etcd visits every key of a range to
// count it even with a limit, so a caller that only cares about deadlines
// within a horizon (the supervisor's safety-net tick) bounds the range:
// after a mass recovery the index holds one future deadline per running
// step, and an unbounded read of the head visited them all.
func (s *Store) NextDeadline(ctx context.Context, now, until time.Time) (at time.Time, ok bool, rev int64, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	end := prefixEnd(s.k.deadlinePrefix())
	if !until.IsZero() {
		end = s.k.deadlinesUntil(until)
	}
	resp, err := s.c.Get(octx, s.k.deadlinesUntil(now), clientv3.WithRange(end),
		clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return time.Time{}, false, 0, etcdErr(ctx, "next deadline", err)
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, false, resp.Header.Revision, nil
	}
	d, err := s.k.parseDeadline(string(resp.Kvs[0].Key))
	if err != nil {
		return time.Time{}, false, 0, err
	}
	return d.CompleteBy, true, resp.Header.Revision, nil
}

// ErrCompacted reports that a watch could not resume from its revision
// because etcd compacted it: list again.
var ErrCompacted = errors.New("store: revision compacted")

// WatchDeadlines calls fn with the deadline of every key added to the
// deadline index after revision rev, until ctx ends or the watch fails
// (ErrCompacted when rev was compacted: read NextDeadline again).
func (s *Store) WatchDeadlines(ctx context.Context, rev int64, fn func(at time.Time)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, s.k.deadlinePrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithFilterDelete(), clientv3.WithKeysOnly())
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return etcdErr(ctx, "watch deadlines", err)
		}
		for _, ev := range resp.Events {
			if d, err := s.k.parseDeadline(string(ev.Kv.Key)); err == nil {
				fn(d.CompleteBy)
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return etcdErr(ctx, "watch deadlines", ErrUnavailable)
}

// ExpiredRecords reads the task records behind expired deadline keys in
// batched transactions and prunes the keys no record implies any more (the
// task was deleted, ended, or moved on to another deadline or attempt):
// each in a transaction that compares the key's and the record's
// revisions, and fence (the supervisor leader's, may be nil), so a key is
// removed only if neither changed since they were read. It returns the
// record for every key that is still live (nil where pruned or where the
// prune lost a race; the next pass sees them again; nil, and the key left,
// where the record is of a version this Reeve does not know), and how many
// keys it removed.
func (s *Store) ExpiredRecords(ctx context.Context, ds []Expired, fence clientv3.Cmp) (recs []*Versioned, pruned int, err error) {
	recs = make([]*Versioned, len(ds))
	for start := 0; start < len(ds); start += readChunk {
		chunk := ds[start:min(start+readChunk, len(ds))]
		octx, cancel := s.opCtx(ctx)
		gets := make([]clientv3.Op, len(chunk))
		for i, d := range chunk {
			gets[i] = clientv3.OpGet(s.k.task(d.Namespace, d.TaskID), clientv3.WithSerializable())
		}
		resp, err := s.c.Txn(octx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return nil, pruned, etcdErr(ctx, "read expired tasks", err)
		}
		var prunes []clientv3.Op
		for i, d := range chunk {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			taskKey := s.k.task(d.Namespace, d.TaskID)
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(d.Key), "=", d.Revision)}
			if fence != (clientv3.Cmp{}) {
				cmps = append(cmps, fence)
			}
			if len(kvs) == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(taskKey), "=", 0))
				prunes = append(prunes, clientv3.OpTxn(cmps, []clientv3.Op{clientv3.OpDelete(d.Key)}, nil))
				continue
			}
			v, err := unmarshalTask(kvs[0])
			if err != nil {
				return nil, pruned, err
			}
			if rv := v.Record.GetRecordVersion(); !knownVersion(rv) {
				// Which keys such a record implies is a newer Reeve's to
				// say: neither pruned nor returned (versions.go).
				s.unknownVersion("read expired tasks", &UnknownVersionError{Kind: KindTask, Namespace: d.Namespace, Name: d.TaskID, Key: taskKey, Version: rv})
				continue
			}
			if val, live := s.k.indexKeys(v.Record)[d.Key]; live {
				if d.slotValue != "" && val != d.slotValue {
					// A slot key the record holds otherwise now (another
					// attempt, another complete-by): this deadline is
					// stale, the slot key's current one is the record's.
					continue
				}
				recs[start+i] = &v
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(taskKey), "=", v.Revision))
			prunes = append(prunes, clientv3.OpTxn(cmps, []clientv3.Op{clientv3.OpDelete(d.Key)}, nil))
		}
		if len(prunes) == 0 {
			continue
		}
		octx, cancel = s.opCtx(ctx)
		presp, err := s.c.Txn(octx).Then(prunes...).Commit()
		cancel()
		if err != nil {
			return nil, pruned, etcdErr(ctx, "prune deadline keys", err)
		}
		for _, r := range presp.Responses {
			if r.GetResponseTxn().GetSucceeded() {
				pruned++
			}
		}
	}
	return recs, pruned, nil
}

// HeartbeatExecutions returns the dispatched executions with a heartbeat
// timeout that agent runs (the beating/ index), in the index's order.
func (s *Store) HeartbeatExecutions(ctx context.Context, ns, agent string) ([]*reevev1.StepRef, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.k.beatingOf(ns, agent)
	resp, err := s.c.Get(octx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(ctx, "heartbeat executions", err)
	}
	var out []*reevev1.StepRef
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(parts) != 3 {
			continue
		}
		attempt, err := strconv.ParseInt(parts[2], 10, 32)
		if err != nil {
			continue
		}
		out = append(out, &reevev1.StepRef{Namespace: ns, TaskId: parts[0], Step: parts[1], Attempt: int32(attempt)})
	}
	return out, nil
}

// LostAgent is an agent whose record vanished with its scheduler's lease.
type LostAgent struct {
	Namespace, AgentID, SchedulerID string
	// Disconnected is when the agent's stream ended, for a disconnected/
	// key (the stream had ended before its scheduler died); zero for an
	// agents/ record.
	Disconnected time.Time
}

// WatchLostAgents calls fn for every agent record deleted after revision rev
// while the scheduler that held it is gone too: its lease expired (the
// scheduler died), as opposed to a stream that ended on a live scheduler,
// which handles its agent's heartbeat deadlines itself. The same holds for a
// disconnected/ key (PutDisconnected): a stream that ended on a scheduler
// that died before it resolved the stream's heartbeat deadlines. It returns
// when ctx ends or a watch fails (ErrCompacted: start again from a fresh
// revision).
func (s *Store) WatchLostAgents(ctx context.Context, rev int64, fn func(LostAgent)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(rev + 1), clientv3.WithFilterPut(), clientv3.WithPrevKV()}
	agents := s.c.Watch(wctx, s.k.prefix+"agents/", opts...)
	disconnected := s.c.Watch(wctx, s.k.prefix+"disconnected/", opts...)
	// Either watch ending (its channel closed: ctx ended or etcd failed)
	// ends the call.
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-agents:
		case resp, ok = <-disconnected:
		}
		if !ok {
			break
		}
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return etcdErr(ctx, "watch agents", err)
		}
		for _, ev := range resp.Events {
			if ev.PrevKv == nil {
				continue
			}
			rec := &storev1.AgentRecord{}
			if err := proto.Unmarshal(ev.PrevKv.Value, rec); err != nil {
				continue
			}
			if v := rec.GetRecordVersion(); !knownVersion(v) {
				s.unknownVersion("watch lost agents", &UnknownVersionError{Kind: KindAgent, Namespace: rec.GetNamespace(), Name: rec.GetAgentId(),
					Key: string(ev.PrevKv.Key), Version: v})
				continue
			}
			octx, ocancel := s.opCtx(ctx)
			sch, err := s.c.Get(octx, s.k.scheduler(rec.GetSchedulerId()), clientv3.WithCountOnly())
			ocancel()
			if err != nil || sch.Count > 0 {
				continue // the scheduler lives (or cannot tell): it handled the stream's end
			}
			lost := LostAgent{Namespace: rec.GetNamespace(), AgentID: rec.GetAgentId(), SchedulerID: rec.GetSchedulerId()}
			if strings.HasPrefix(string(ev.PrevKv.Key), s.k.prefix+"disconnected/") {
				lost.Disconnected = rec.GetConnectTime().AsTime()
			}
			fn(lost)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return etcdErr(ctx, "watch agents", ErrUnavailable)
}

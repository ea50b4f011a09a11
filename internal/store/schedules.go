package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Schedules (issue 38) live in two key families (keys.go lists them):
//
//	schedules/<ns>/<name>                         reeve.v1.Schedule: spec, action, policies, state, info
//	schedule-due/<fire-time:%020d>/<ns>/<name>    empty: when the firer looks at the schedule next
//	                                              (info.next_fire_time, unix ns); none while paused
//
// A schedule's due key is written, moved and deleted in the transaction
// that writes its record, so the firer reads only the due part of the
// index (DueSchedules): O(due), never every schedule.

// KindSchedule is the kind of a NotFoundError for a schedule.
const KindSchedule = "schedule"

func (k keys) schedule(ns, name string) string { return k.prefix + "schedules/" + ns + "/" + name }
func (k keys) schedulesOf(ns string) string    { return k.prefix + "schedules/" + ns + "/" }
func (k keys) scheduleDuePrefix() string       { return k.prefix + "schedule-due/" }
func (k keys) scheduleDue(at time.Time, ns, name string) string {
	return fmt.Sprintf("%s%020d/%s/%s", k.scheduleDuePrefix(), at.UnixNano(), ns, name)
}

// parseScheduleDue inverts scheduleDue.
func (k keys) parseScheduleDue(key string) (DueSchedule, error) {
	parts := strings.Split(strings.TrimPrefix(key, k.scheduleDuePrefix()), "/")
	if len(parts) != 3 {
		return DueSchedule{}, fmt.Errorf("store: malformed schedule due key %q", key)
	}
	nanos, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return DueSchedule{}, fmt.Errorf("store: malformed schedule due key %q: %w", key, err)
	}
	return DueSchedule{At: time.Unix(0, nanos), Namespace: parts[1], Name: parts[2], Key: key}, nil
}

// dueKeyOf returns the due key a schedule record implies, "" for none.
func (k keys) dueKeyOf(sc *reevev1.Schedule) string {
	if sc.GetPaused() || sc.GetInfo().GetNextFireTime() == nil {
		return ""
	}
	return k.scheduleDue(sc.GetInfo().GetNextFireTime().AsTime(), sc.GetNamespace(), sc.GetName())
}

// DueSchedule is one key of the schedule due index.
type DueSchedule struct {
	At              time.Time
	Namespace, Name string
	// Key is the index key, for DueSchedules' after.
	Key string
}

func scheduleNotFound(ns, name string) error {
	return notFound(KindSchedule, ns, name, "schedule %q in namespace %q", name, ns)
}

// CreateSchedule stores a new schedule with its due key
// (info.next_fire_time); ErrAlreadyExists when the name is taken.
func (s *Store) CreateSchedule(ctx context.Context, sc *reevev1.Schedule) error {
	key := s.k.schedule(sc.GetNamespace(), sc.GetName())
	sc = proto.Clone(sc).(*reevev1.Schedule)
	dropVersionField(sc) // what this Reeve writes is version 1
	val, err := marshal(sc)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(key, val)}
	if due := s.k.dueKeyOf(sc); due != "" {
		ops = append(ops, clientv3.OpPut(due, ""))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(ops...).Commit()
	if err != nil {
		return etcdErr(ctx, "create schedule", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("schedule %q in namespace %q: %w", sc.GetName(), sc.GetNamespace(), ErrAlreadyExists)
	}
	return nil
}

// GetSchedule returns a schedule and its record's revision (a
// linearizable read).
func (s *Store) GetSchedule(ctx context.Context, ns, name string) (*reevev1.Schedule, int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.schedule(ns, name))
	if err != nil {
		return nil, 0, etcdErr(ctx, "get schedule", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, scheduleNotFound(ns, name)
	}
	sc := &reevev1.Schedule{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, sc); err != nil {
		return nil, 0, fmt.Errorf("store: decode %s: %w", resp.Kvs[0].Key, err)
	}
	return sc, resp.Kvs[0].ModRevision, nil
}

// ListSchedules returns up to limit schedules of namespace ns by name,
// after the name after ("" from the first), and whether more follow.
func (s *Store) ListSchedules(ctx context.Context, ns, after string, limit int) ([]*reevev1.Schedule, bool, error) {
	prefix := s.k.schedulesOf(ns)
	from := prefix
	if after != "" {
		from = prefix + after + "\x00"
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, from, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, false, etcdErr(ctx, "list schedules", err)
	}
	out := make([]*reevev1.Schedule, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		sc := &reevev1.Schedule{}
		if err := proto.Unmarshal(kv.Value, sc); err != nil {
			return nil, false, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out = append(out, sc)
	}
	return out, resp.More, nil
}

// UpdateSchedule reads a schedule, lets fn change a copy of it, and writes
// the copy with the due key it implies (moved or deleted with it) in one
// transaction (nested in a group commit with other schedules' writes when
// they come together: schedulebatch.go) that compares the record's
// revision and, when set, fence (a supervisor leader's election: ErrFenced
// when it fails). A lost compare
// reads again and calls fn again (so fn must be safe to repeat), at most 20
// times (ErrConflict). fn's error aborts the update and is returned.
func (s *Store) UpdateSchedule(ctx context.Context, ns, name string, fence clientv3.Cmp, fn func(*reevev1.Schedule) error) (*reevev1.Schedule, error) {
	return s.UpdateScheduleFrom(ctx, ns, name, nil, 0, fence, fn)
}

// UpdateScheduleFrom is UpdateSchedule starting from a record read before
// (GetSchedules: cur at revision rev) instead of reading it first; nil cur
// reads it. A record that changed since is read again, as after a lost
// compare.
func (s *Store) UpdateScheduleFrom(ctx context.Context, ns, name string, cur *reevev1.Schedule, rev int64, fence clientv3.Cmp, fn func(*reevev1.Schedule) error) (*reevev1.Schedule, error) {
	key := s.k.schedule(ns, name)
	for range maxUpdateRetries {
		if cur == nil {
			var err error
			if cur, rev, err = s.GetSchedule(ctx, ns, name); err != nil {
				return nil, err
			}
		}
		if v := unknownFieldVersion(cur); !knownVersion(v) {
			// A newer Reeve's schedule: not rewritten (versions.go).
			return nil, s.unknownVersion("update schedule", &UnknownVersionError{Kind: KindSchedule, Namespace: ns, Name: name, Key: key, Version: v})
		}
		next := proto.Clone(cur).(*reevev1.Schedule)
		if err := fn(next); err != nil {
			return nil, err
		}
		val, err := marshal(next)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{clientv3.OpPut(key, val)}
		oldDue, newDue := s.k.dueKeyOf(cur), s.k.dueKeyOf(next)
		if oldDue != "" && oldDue != newDue {
			ops = append(ops, clientv3.OpDelete(oldDue))
		}
		if newDue != "" {
			ops = append(ops, clientv3.OpPut(newDue, ""))
		}
		// Group-committed with other schedules' writes (schedulebatch.go).
		fenced, ok, err := s.writeSchedule(ctx, key, rev, fence, ops)
		if err != nil {
			return nil, err
		}
		if fenced {
			return nil, fmt.Errorf("update schedule %q: %w", name, ErrFenced)
		}
		if ok {
			return next, nil
		}
		cur = nil
	}
	return nil, fmt.Errorf("update schedule %q: %w", name, ErrConflict)
}

// ScheduleRef names a schedule.
type ScheduleRef struct{ Namespace, Name string }

// GetSchedules reads many schedules in as few transactions as etcd's
// operation limit allows (each transaction reads one revision):
// each with its record's revision, nil (and 0) where it does
// not exist. A record read here may be stale by the time it is written:
// UpdateScheduleFrom's compare finds that out.
func (s *Store) GetSchedules(ctx context.Context, refs []ScheduleRef) ([]*reevev1.Schedule, []int64, error) {
	out, revs := make([]*reevev1.Schedule, len(refs)), make([]int64, len(refs))
	for start := 0; start < len(refs); start += s.maxTxnOps {
		chunk := refs[start:min(start+s.maxTxnOps, len(refs))]
		gets := make([]clientv3.Op, len(chunk))
		for i, r := range chunk {
			gets[i] = clientv3.OpGet(s.k.schedule(r.Namespace, r.Name))
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Txn(octx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return nil, nil, etcdErr(ctx, "get schedules", err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				continue
			}
			sc := &reevev1.Schedule{}
			if err := proto.Unmarshal(kvs[0].Value, sc); err != nil {
				return nil, nil, fmt.Errorf("store: decode %s: %w", kvs[0].Key, err)
			}
			out[start+i], revs[start+i] = sc, kvs[0].ModRevision
		}
	}
	return out, revs, nil
}

// guardedTxn commits ops if cmp holds and, inside it, fence (when set):
// ok false means cmp failed, fenced true that fence did.
func (s *Store) guardedTxn(ctx context.Context, op string, cmp, fence clientv3.Cmp, ops []clientv3.Op) (fenced, ok bool, err error) {
	then := ops
	if fence != (clientv3.Cmp{}) {
		then = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{fence}, ops, nil)}
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(cmp).Then(then...).Commit()
	if err != nil {
		return false, false, etcdErr(ctx, op, err)
	}
	if !resp.Succeeded {
		return false, false, nil
	}
	if fence != (clientv3.Cmp{}) && !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		return true, false, nil
	}
	return false, true, nil
}

// DeleteSchedule removes a schedule and its due key; it returns the
// record it removed.
func (s *Store) DeleteSchedule(ctx context.Context, ns, name string) (*reevev1.Schedule, error) {
	key := s.k.schedule(ns, name)
	for range maxUpdateRetries {
		cur, rev, err := s.GetSchedule(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		if due := s.k.dueKeyOf(cur); due != "" {
			ops = append(ops, clientv3.OpDelete(due))
		}
		_, ok, err := s.guardedTxn(ctx, "delete schedule", clientv3.Compare(clientv3.ModRevision(key), "=", rev), clientv3.Cmp{}, ops)
		if err != nil {
			return nil, err
		}
		if ok {
			return cur, nil
		}
	}
	return nil, fmt.Errorf("delete schedule %q: %w", name, ErrConflict)
}

// DueSchedules returns up to limit keys of the due index at or before now,
// earliest first, after the key after ("" from the first): the schedules
// to fire, a page at a time.
func (s *Store) DueSchedules(ctx context.Context, after string, now time.Time, limit int) ([]DueSchedule, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	from := s.k.scheduleDuePrefix()
	if after != "" {
		from = after + "\x00"
	}
	end := fmt.Sprintf("%s%020d", s.k.scheduleDuePrefix(), now.UnixNano()+1)
	if from >= end {
		return nil, nil
	}
	resp, err := s.c.Get(octx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, etcdErr(ctx, "due schedules", err)
	}
	out := make([]DueSchedule, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d, err := s.k.parseScheduleDue(string(kv.Key))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// NextScheduleDue returns the earliest time in the due index (ok false
// when it is empty) and the revision it was read at, to watch from.
func (s *Store) NextScheduleDue(ctx context.Context) (at time.Time, ok bool, rev int64, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p := s.k.scheduleDuePrefix()
	resp, err := s.c.Get(octx, p, clientv3.WithRange(prefixEnd(p)), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return time.Time{}, false, 0, etcdErr(ctx, "next schedule due", err)
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, false, resp.Header.Revision, nil
	}
	d, err := s.k.parseScheduleDue(string(resp.Kvs[0].Key))
	if err != nil {
		return time.Time{}, false, 0, err
	}
	return d.At, true, resp.Header.Revision, nil
}

// WatchScheduleDue calls fn with the time of every key added to the due
// index after revision rev, until ctx ends or the watch fails
// (ErrCompacted when rev was compacted: read NextScheduleDue again).
func (s *Store) WatchScheduleDue(ctx context.Context, rev int64, fn func(at time.Time)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, s.k.scheduleDuePrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithFilterDelete(), clientv3.WithKeysOnly())
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return etcdErr(ctx, "watch schedule due", err)
		}
		for _, ev := range resp.Events {
			if d, err := s.k.parseScheduleDue(string(ev.Kv.Key)); err == nil {
				fn(d.At)
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return etcdErr(ctx, "watch schedule due", ErrUnavailable)
}

// PruneScheduleDue deletes a due key whose schedule no longer exists (it
// cannot happen through the store, which writes both together; it
// repairs an index written by hand), with fence when set.
func (s *Store) PruneScheduleDue(ctx context.Context, d DueSchedule, fence clientv3.Cmp) error {
	cmp := clientv3.Compare(clientv3.CreateRevision(s.k.schedule(d.Namespace, d.Name)), "=", 0)
	_, _, err := s.guardedTxn(ctx, "prune schedule due key", cmp, fence, []clientv3.Op{clientv3.OpDelete(s.k.scheduleDue(d.At, d.Namespace, d.Name))})
	return err
}

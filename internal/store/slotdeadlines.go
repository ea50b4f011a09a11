package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The second deadline index: a dispatched attempt whose claim took a
// max_running slot has its complete-by in its slot key's value
// ("<task-id>/<step>/<attempt> <complete-by, Unix ns>", slotDeadline in
// queues.go), not in a deadlines/ key. slots/ holds at most the sum of
// the types' limits, so the supervisor leader lists it once and follows it
// with a watch, keeping every slot's deadline in memory (supervisor's
// slotDeadlines), instead of reading it by time as it reads deadlines/.

// SlotDeadlineEvent is a change of one slot key: Deadline is set (ok)
// while the key holds a complete-by; a deleted key, or one whose value
// holds none (an adopted attempt, or one claimed by an older Reeve, whose
// complete-by is in deadlines/), has ok false.
type SlotDeadlineEvent struct {
	Key      string
	Deadline Expired
	OK       bool
}

// ListSlotDeadlines returns the deadlines every slot key holds, and the
// revision they were read at (to watch from).
func (s *Store) ListSlotDeadlines(ctx context.Context) ([]Expired, int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.slotsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, etcdErr(ctx, "list slot deadlines", err)
	}
	var out []Expired
	for _, kv := range resp.Kvs {
		if d, ok := s.k.parseSlotDeadline(kv); ok {
			out = append(out, d)
		}
	}
	return out, resp.Header.Revision, nil
}

// WatchSlotDeadlines calls fn with every change of a slot key after
// revision rev, until ctx ends or the watch fails (ErrCompacted when rev
// was compacted: list again).
func (s *Store) WatchSlotDeadlines(ctx context.Context, rev int64, fn func(SlotDeadlineEvent)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, s.k.slotsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return etcdErr(ctx, "watch slot deadlines", err)
		}
		for _, ev := range resp.Events {
			e := SlotDeadlineEvent{Key: string(ev.Kv.Key)}
			if ev.Type == mvccpb.PUT {
				e.Deadline, e.OK = s.k.parseSlotDeadline(ev.Kv)
			}
			fn(e)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return etcdErr(ctx, "watch slot deadlines", ErrUnavailable)
}

// BackoffKey names the execution a deadline is of, for a caller that
// keeps state per expired execution (the supervisor's backoffs): the key
// for a deadlines/ key, which names the attempt and its complete-by; for a
// slot key, which later attempts and other tasks reuse, the key with the
// value that names the attempt and its complete-by.
func (e Expired) BackoffKey() string {
	if e.slotValue == "" {
		return e.Key
	}
	return e.Key + " " + e.slotValue
}

// parseSlotDeadline reads the deadline a slot key holds; false when it
// holds none or is malformed.
func (k keys) parseSlotDeadline(kv *mvccpb.KeyValue) (Expired, bool) {
	rest := strings.TrimPrefix(string(kv.Key), k.slotsPrefix())
	ns, _, ok := strings.Cut(rest, "/")
	if !ok {
		return Expired{}, false
	}
	ref, at, ok := strings.Cut(string(kv.Value), " ")
	if !ok {
		return Expired{}, false
	}
	nanos, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return Expired{}, false
	}
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return Expired{}, false
	}
	attempt, err := strconv.ParseInt(parts[2], 10, 32)
	if err != nil {
		return Expired{}, false
	}
	return Expired{
		Deadline:  Deadline{CompleteBy: time.Unix(0, nanos), Namespace: ns, TaskID: parts[0], Step: parts[1], Attempt: int32(attempt)},
		Key:       string(kv.Key),
		Revision:  kv.ModRevision,
		slotValue: string(kv.Value),
	}, true
}

// String names a deadline for logs.
func (d Deadline) String() string {
	return fmt.Sprintf("%s/%s/%s/%d at %s", d.Namespace, d.TaskID, d.Step, d.Attempt, d.CompleteBy.UTC().Format(time.RFC3339Nano))
}

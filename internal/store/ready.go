package store

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// ReadyEvent is a change of the ready queue.
type ReadyEvent struct {
	// Reset means the watch restarted: forget every entry; the entries that
	// follow are the whole queue again.
	Reset bool
	// Key identifies the entry.
	Key string
	// Entry is the queued step; nil when it left the queue (claimed,
	// canceled), or when it is of a version this Reeve does not dispatch.
	Entry *storev1.ReadyEntry
}

// WatchReady sends the whole ready queue, then every change of it, until ctx
// ends. After any interruption (etcd down, compaction) it starts over with a
// Reset event. It returns ctx's error.
func (s *Store) WatchReady(ctx context.Context, events chan<- ReadyEvent) error {
	prefix := s.k.readyPrefix()
	return listAndFollow(ctx,
		func() (int64, error) { return s.listReady(ctx, prefix, events) },
		func(rev int64) error { return s.followReady(ctx, prefix, rev, events) })
}

// listAndFollow runs list, then follow from the revision list read at,
// again and again (500 ms apart) until ctx ends: a watch that breaks (etcd
// down, compaction) starts over with a fresh list. It returns ctx's error.
func listAndFollow(ctx context.Context, list func() (int64, error), follow func(rev int64) error) error {
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-retry.C:
		}
		rev, err := list()
		if err == nil {
			_ = follow(rev)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		retry.Reset(500 * time.Millisecond)
	}
}

func (s *Store) listReady(ctx context.Context, prefix string, events chan<- ReadyEvent) (int64, error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.c.Get(octx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, etcdErr(ctx, "list ready", err)
	}
	if !send(ctx, events, ReadyEvent{Reset: true}) {
		return 0, ctx.Err()
	}
	for _, kv := range resp.Kvs {
		if ev, ok := s.readyEvent(prefix, kv, false); ok && !send(ctx, events, ev) {
			return 0, ctx.Err()
		}
	}
	return resp.Header.Revision, nil
}

func (s *Store) followReady(ctx context.Context, prefix string, rev int64, events chan<- ReadyEvent) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, e := range wr.Events {
			if ev, ok := s.readyEvent(prefix, e.Kv, e.Type == mvccpb.DELETE); ok && !send(ctx, events, ev) {
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

// readyEvent decodes one ready-queue change. An entry of a version this
// Reeve does not know is not dispatched (versions.go): it is reported, and
// the event says the key left the queue (Entry nil), so that a dispatcher
// also forgets an earlier entry of that key.
func (s *Store) readyEvent(prefix string, kv *mvccpb.KeyValue, deleted bool) (ReadyEvent, bool) {
	ev := ReadyEvent{Key: strings.TrimPrefix(string(kv.Key), prefix)}
	if deleted {
		return ev, true
	}
	entry := &storev1.ReadyEntry{}
	if err := proto.Unmarshal(kv.Value, entry); err != nil {
		return ev, false
	}
	if v := entry.GetRecordVersion(); !knownVersion(v) {
		s.unknownVersion("watch ready queue", &UnknownVersionError{Kind: KindReadyEntry, Namespace: entry.GetNamespace(),
			Name: entry.GetTaskId() + "/" + entry.GetStep(), Key: string(kv.Key), Version: v})
		return ev, true
	}
	ev.Entry = entry
	return ev, true
}

func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

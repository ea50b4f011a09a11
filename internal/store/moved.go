package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The tasks moved to the archive, for the deduplication window of a
// submission with a chosen task id (docs/archive.md): each move of a batch
// of tasks writes one key
//
//	moved/<move-time:%020d>/<random>    the tasks' fingerprints, 8 bytes each (big endian)
//
// after the archive holds them and before they leave etcd, so a task etcd no
// longer holds has its fingerprint in a moved/ key, until the key's move
// time is older than the window (DeleteMovedBefore). A batch costs one put
// and, once out of the window, its share of one range delete.

func (k keys) movedPrefix() string { return k.prefix + "moved/" }

func (k keys) moved(at time.Time, suffix string) string {
	return fmt.Sprintf("%s%020d/%s", k.movedPrefix(), at.UnixNano(), suffix)
}

func (k keys) movedUntil(t time.Time) string {
	return fmt.Sprintf("%s%020d", k.movedPrefix(), t.UnixNano())
}

// Fingerprint is the 64-bit FNV-1a hash of a task's namespace and id that
// moved/ keys hold. Two tasks share one with a probability of about n/2^64
// for n tasks in the window: a submission may then be refused while the
// archive is unavailable, never accepted as new when it is not.
func Fingerprint(ns, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ns))
	h.Write([]byte{'/'})
	h.Write([]byte(id))
	return h.Sum64()
}

// MovedBatch is one moved/ key: when its tasks moved, and their
// fingerprints, sorted.
type MovedBatch struct {
	At           time.Time
	Fingerprints []uint64
}

// PutMoved records that the tasks with fingerprints fps moved to the
// archive at at: one new key.
func (s *Store) PutMoved(ctx context.Context, at time.Time, fps []uint64) error {
	if len(fps) == 0 {
		return nil
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	key := s.k.moved(at, hex.EncodeToString(r[:]))
	val := make([]byte, 8*len(fps))
	for i, fp := range fps {
		binary.BigEndian.PutUint64(val[8*i:], fp)
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	// A new key: the compare makes a (vanishingly unlikely) repeated
	// random suffix an error, not an overwrite.
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return etcdErr(ctx, "record moved tasks", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("record moved tasks: key %s exists", key)
	}
	return nil
}

// DeleteMovedBefore deletes the moved/ keys of moves before t: one range
// delete.
func (s *Store) DeleteMovedBefore(ctx context.Context, t time.Time) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Delete(octx, s.k.movedPrefix(), clientv3.WithRange(s.k.movedUntil(t)))
	return etcdErr(ctx, "delete moved tasks", err)
}

// MovedFollower receives what WatchMoved reads.
type MovedFollower struct {
	// Reset is called before a (re)listing: what came before is replaced
	// by the batches that follow.
	Reset func()
	// Batch is called for each moved/ key, in revision order.
	Batch func(MovedBatch)
	// Synced is called with a revision once every moved/ key written at or
	// before it has been given to Batch.
	Synced func(rev int64)
	// Progress, when it receives, asks etcd for a Synced call at its
	// current revision (a progress notification), so that a reader can wait
	// until what it read elsewhere is covered.
	Progress <-chan struct{}
}

// WatchMoved lists the moved/ keys of moves at or after since(), then
// follows new ones, until ctx ends. It lists again (since() is asked again)
// when the watch breaks.
func (s *Store) WatchMoved(ctx context.Context, since func() time.Time, f MovedFollower) error {
	return listAndFollow(ctx,
		func() (int64, error) { return s.listMoved(ctx, since(), f) },
		func(rev int64) error { return s.followMoved(ctx, rev, f) })
}

func (s *Store) listMoved(ctx context.Context, since time.Time, f MovedFollower) (int64, error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.c.Get(octx, s.k.movedUntil(since), clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.k.movedPrefix())))
	cancel()
	if err != nil {
		return 0, etcdErr(ctx, "list moved tasks", err)
	}
	f.Reset()
	for _, kv := range resp.Kvs {
		if b, ok := s.movedBatch(string(kv.Key), kv.Value); ok {
			f.Batch(b)
		}
	}
	f.Synced(resp.Header.Revision)
	return resp.Header.Revision, nil
}

func (s *Store) followMoved(ctx context.Context, rev int64, f MovedFollower) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, s.k.movedPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.Progress:
			if err := s.c.RequestProgress(wctx); err != nil {
				return etcdErr(ctx, "watch moved tasks", err)
			}
		case wr, ok := <-wch:
			if !ok {
				return ctx.Err()
			}
			if err := wr.Err(); err != nil {
				return err
			}
			for _, e := range wr.Events {
				if b, ok := s.movedBatch(string(e.Kv.Key), e.Kv.Value); ok {
					f.Batch(b)
				}
			}
			f.Synced(wr.Header.Revision)
		}
	}
}

// movedBatch decodes a moved/ key; ok is false for a malformed one.
func (s *Store) movedBatch(key string, val []byte) (MovedBatch, bool) {
	rest := strings.TrimPrefix(key, s.k.movedPrefix())
	ts, _, found := strings.Cut(rest, "/")
	ns, err := strconv.ParseInt(ts, 10, 64)
	if !found || err != nil || len(val)%8 != 0 {
		return MovedBatch{}, false
	}
	fps := make([]uint64, len(val)/8)
	for i := range fps {
		fps[i] = binary.BigEndian.Uint64(val[8*i:])
	}
	slices.Sort(fps)
	return MovedBatch{At: time.Unix(0, ns), Fingerprints: fps}, true
}

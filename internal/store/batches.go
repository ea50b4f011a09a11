package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// Batch jobs (docs/batches.md): batches/<ns>/<id> holds a BatchRecord, and
// batch-owner/<ns>/<id> (empty, under a scheduler's lease) names the
// scheduler running it. A runner's writes compare the owner key's create
// revision, so a runner that lost its lease (and the job to another) writes
// nothing more.

// KindBatch is the kind of a NotFoundError naming a batch job.
const KindBatch = "batch"

// MaxBatches bounds the jobs ListBatches and RunningBatches read.
const MaxBatches = 1000

// Batch is a batch record and the revision it was read at.
type Batch struct {
	Record   *storev1.BatchRecord
	Revision int64
}

func (k keys) batch(ns, id string) string      { return k.prefix + "batches/" + ns + "/" + id }
func (k keys) batches() string                 { return k.prefix + "batches/" }
func (k keys) batchOwner(ns, id string) string { return k.prefix + "batch-owner/" + ns + "/" + id }

// CreateBatch writes a new job unless its id is taken; then it returns the
// job that holds it (created false).
func (s *Store) CreateBatch(ctx context.Context, rec *storev1.BatchRecord) (*Batch, bool, error) {
	j := rec.GetJob()
	key := s.k.batch(j.GetNamespace(), j.GetId())
	val, err := marshal(rec)
	if err != nil {
		return nil, false, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, false, etcdErr(ctx, "create batch", err)
	}
	if resp.Succeeded {
		return &Batch{Record: rec, Revision: resp.Header.Revision}, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, false, fmt.Errorf("create batch %s: %w", j.GetId(), ErrConflict)
	}
	b, err := s.decodeBatch(kvs[0].Value, kvs[0].ModRevision, string(kvs[0].Key))
	return b, false, err
}

// GetBatch reads a job.
func (s *Store) GetBatch(ctx context.Context, ns, id string) (*Batch, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	key := s.k.batch(ns, id)
	resp, err := s.c.Get(octx, key)
	if err != nil {
		return nil, etcdErr(ctx, "get batch", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &NotFoundError{What: fmt.Sprintf("batch %q in namespace %q", id, ns), Kind: KindBatch, Namespace: ns, Name: id}
	}
	return s.decodeBatch(resp.Kvs[0].Value, resp.Kvs[0].ModRevision, key)
}

// ListBatches reads the jobs of ns ("" for every namespace), newest first,
// at most MaxBatches.
func (s *Store) ListBatches(ctx context.Context, ns string) ([]*Batch, error) {
	prefix := s.k.batches()
	if ns != "" {
		prefix += ns + "/"
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxBatches))
	if err != nil {
		return nil, etcdErr(ctx, "list batches", err)
	}
	out := make([]*Batch, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		b, err := s.decodeBatch(kv.Value, kv.ModRevision, string(kv.Key))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Batch) int {
		if c := b.Record.GetJob().GetCreateTime().AsTime().Compare(a.Record.GetJob().GetCreateTime().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(b.Record.GetJob().GetId(), a.Record.GetJob().GetId())
	})
	return out, nil
}

// UpdateBatch applies fn to a job's record and writes it, comparing the
// revision it read (ErrConflict when another write came between).
func (s *Store) UpdateBatch(ctx context.Context, ns, id string, fn func(*storev1.BatchRecord) error) (*Batch, error) {
	b, err := s.GetBatch(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	rec := proto.Clone(b.Record).(*storev1.BatchRecord)
	if err := fn(rec); err != nil {
		return b, err
	}
	return s.SaveBatch(ctx, rec, b.Revision, 0)
}

// SaveBatch writes a job's record read at revision rev. With ownerRev set,
// the job's owner key must still have that create revision (the runner's
// claim): ErrConflict otherwise, and nothing is written.
func (s *Store) SaveBatch(ctx context.Context, rec *storev1.BatchRecord, rev, ownerRev int64) (*Batch, error) {
	j := rec.GetJob()
	key := s.k.batch(j.GetNamespace(), j.GetId())
	val, err := marshal(rec)
	if err != nil {
		return nil, err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
	if ownerRev != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.k.batchOwner(j.GetNamespace(), j.GetId())), "=", ownerRev))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(cmps...).Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return nil, etcdErr(ctx, "save batch", err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("save batch %s: %w", j.GetId(), ErrConflict)
	}
	return &Batch{Record: rec, Revision: resp.Header.Revision}, nil
}

// ClaimBatch makes the holder of lease the job's runner when it has none;
// it returns the owner key's create revision (SaveBatch's ownerRev), or 0
// when another runner holds it.
func (s *Store) ClaimBatch(ctx context.Context, ns, id string, lease clientv3.LeaseID) (int64, error) {
	key := s.k.batchOwner(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(lease))).Commit()
	if err != nil {
		return 0, etcdErr(ctx, "claim batch", err)
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return resp.Header.Revision, nil
}

// DeleteBatch deletes a job read at revision rev, and its owner key.
func (s *Store) DeleteBatch(ctx context.Context, ns, id string, rev int64) error {
	key := s.k.batch(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(s.k.batchOwner(ns, id))).Commit()
	return etcdErr(ctx, "delete batch", err)
}

// WatchBatches calls fn whenever a job is written (after revision rev; 0:
// from now), until ctx ends or the watch fails (callers poll as well).
func (s *Store) WatchBatches(ctx context.Context, rev int64, fn func()) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev+1))
	}
	for resp := range s.c.Watch(clientv3.WithRequireLeader(ctx), s.k.batches(), opts...) {
		if resp.Err() != nil {
			return
		}
		fn()
	}
}

func (s *Store) decodeBatch(val []byte, rev int64, key string) (*Batch, error) {
	rec := &storev1.BatchRecord{}
	if err := proto.Unmarshal(val, rec); err != nil {
		return nil, fmt.Errorf("store: decode %s: %w", key, err)
	}
	if v := rec.GetRecordVersion(); !knownVersion(v) {
		j := rec.GetJob()
		return nil, s.unknownVersion("read batch", &UnknownVersionError{Kind: KindBatch, Namespace: j.GetNamespace(), Name: j.GetId(), Key: key, Version: v})
	}
	return &Batch{Record: rec, Revision: rev}, nil
}

// IsBatchRunning reports whether a job still runs.
func IsBatchRunning(j *reevev1.BatchJob) bool {
	return j.GetState() == reevev1.BatchState_BATCH_STATE_RUNNING
}

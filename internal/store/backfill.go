package store

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// backfillPage is how many task records one backfill step reads and
// guards in one transaction (nested, one compare per task).
const backfillPage = 32

// BackfillCreatedIndexes writes the created indexes (keys.go) of task
// records written before they existed, once per store: it returns at once
// when the meta/created-index marker is present, and sets it when every task
// has them. Each task's keys are written in a transaction guarded by the
// record's mod revision, so a concurrent update wins and the task is read
// again. Records written since the indexes exist already have them; writing
// them again is harmless. It reads every task record once, a page at a
// time, and returns how many tasks it visited.
func (s *Store) BackfillCreatedIndexes(ctx context.Context) (visited int, err error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.c.Get(octx, s.k.createdMeta(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return 0, etcdErr(ctx, "backfill created index", err)
	}
	if resp.Count > 0 {
		return 0, nil
	}
	prefix := s.k.prefix + "tasks/"
	start := prefix
	for {
		octx, cancel := s.opCtx(ctx)
		page, err := s.c.Get(octx, start, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(backfillPage))
		cancel()
		if err != nil {
			return visited, etcdErr(ctx, "backfill created index", err)
		}
		if len(page.Kvs) == 0 {
			break
		}
		var nested []clientv3.Op
		for _, kv := range page.Kvs {
			v, err := unmarshalTask(kv)
			if err != nil {
				return visited, err
			}
			guard := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}
			if rv := v.Record.GetRecordVersion(); !knownVersion(rv) {
				// Which keys it implies is a newer Reeve's to say, and
				// that Reeve wrote them: nothing to write (versions.go).
				// The empty transaction keeps the responses in step with
				// the page.
				ns, id, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
				s.unknownVersion("backfill created index", &UnknownVersionError{Kind: KindTask, Namespace: ns, Name: id, Key: string(kv.Key), Version: rv})
				nested = append(nested, clientv3.OpTxn(guard, nil, nil))
				continue
			}
			var puts []clientv3.Op
			var primary string // the created-state/ key: written with the others, so its absence means all are missing
			for key, val := range s.k.indexKeys(v.Record) {
				if strings.HasPrefix(key, s.k.prefix+"created") {
					puts = append(puts, clientv3.OpPut(key, val))
				}
				if strings.HasPrefix(key, s.k.prefix+"created-state/") {
					primary = key
				}
			}
			// Only where they are missing: rewriting keys a newer Reeve
			// wrote would change them under readers for nothing.
			then := puts
			if primary != "" {
				then = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(primary), "=", 0)}, puts, nil)}
			}
			nested = append(nested, clientv3.OpTxn(guard, then, nil))
		}
		octx, cancel = s.opCtx(ctx)
		tresp, err := s.c.Txn(octx).Then(nested...).Commit()
		cancel()
		if err != nil {
			return visited, etcdErr(ctx, "backfill created index", err)
		}
		// A task updated since the page was read failed its compare: read
		// the page again from it.
		next := string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
		for i, r := range tresp.Responses {
			if !r.GetResponseTxn().GetSucceeded() {
				next = string(page.Kvs[i].Key)
				break
			}
			visited++
		}
		if next == string(page.Kvs[len(page.Kvs)-1].Key)+"\x00" && !page.More {
			break
		}
		start = next
	}
	octx, cancel = s.opCtx(ctx)
	defer cancel()
	if _, err := s.c.Put(octx, s.k.createdMeta(), ""); err != nil {
		return visited, etcdErr(ctx, "backfill created index", err)
	}
	return visited, nil
}

// legacyPage is how many keys of an old index one step deletes.
const legacyPage = 1000

// DropLegacyIndexes deletes the indexes of older layouts (keys.go: the
// states/ index before issue 15; created/ and created-wf/ before its sixth
// pass), a page of keys per transaction, and returns how many keys it
// deleted. Nothing reads them any more, and nothing but an older scheduler
// writes them: keys such a scheduler writes while both versions run are
// deleted at the next start of a newer one (a states/ key also with its
// task, by the retention sweep). A store without them costs one read per
// index.
func (s *Store) DropLegacyIndexes(ctx context.Context) (deleted int64, err error) {
	for _, prefix := range s.k.legacyIndexes() {
		n, err := s.dropPrefix(ctx, prefix)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// dropPrefix deletes every key under prefix, a page per transaction.
func (s *Store) dropPrefix(ctx context.Context, prefix string) (deleted int64, err error) {
	for {
		octx, cancel := s.opCtx(ctx)
		page, err := s.c.Get(octx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithKeysOnly(), clientv3.WithLimit(legacyPage))
		cancel()
		if err != nil {
			return deleted, etcdErr(ctx, "drop legacy index", err)
		}
		if len(page.Kvs) == 0 {
			return deleted, nil
		}
		last := string(page.Kvs[len(page.Kvs)-1].Key)
		octx, cancel = s.opCtx(ctx)
		resp, err := s.c.Delete(octx, prefix, clientv3.WithRange(last+"\x00"))
		cancel()
		if err != nil {
			return deleted, etcdErr(ctx, "drop legacy index", err)
		}
		deleted += resp.Deleted
		if !page.More {
			return deleted, nil
		}
	}
}

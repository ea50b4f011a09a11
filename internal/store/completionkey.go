package store

import (
	"context"
	"crypto/rand"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// CompletionKeyBytes is the size of the cluster's completion-token key.
const CompletionKeyBytes = 32

// completionKey is meta/completion-key: the cluster's secret for
// completion tokens (see CompletionKey).
func (k keys) completionKey() string { return k.prefix + "meta/completion-key" }

// CompletionKey returns the cluster's secret key for completion tokens
// (32 random bytes, the HMAC-SHA256 key of every token: scheduler
// completion.go), creating it on first use with a create-only transaction,
// so that every scheduler of the cluster, whichever starts first, uses the
// same key, for ever. Anyone who can read etcd under the prefix can read
// it, as they can read every task (docs/security.md).
func (s *Store) CompletionKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, CompletionKeyBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("store: completion key: %w", err)
	}
	key := s.k.completionKey()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(fresh))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, etcdErr(ctx, "completion key", err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 || len(kvs[0].Value) != CompletionKeyBytes {
		return nil, fmt.Errorf("store: completion key %s is not %d bytes: refusing to use it", key, CompletionKeyBytes)
	}
	return kvs[0].Value, nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// MaxLabelCount bounds the tasks CountByLabels reads: a label that more
// live tasks than this carry is counted with ErrTooManyToCount.
const MaxLabelCount = 100_000

// ErrTooManyToCount means a count by labels would read more than
// MaxLabelCount tasks.
var ErrTooManyToCount = errors.New("store: too many tasks with that label to count")

// CountByLabels counts the tasks of namespace ns (of workflow wf when not
// empty) that have every one of labels, per state, at one revision: it
// reads the label index of one label and the records it names (there is
// no count-only range for a label and a state), at most MaxLabelCount.
func (s *Store) CountByLabels(ctx context.Context, ns, wf string, labels map[string]string) (map[reevev1.TaskState]int64, int64, error) {
	first := slices.Min(slices.Collect(maps.Keys(labels)))
	prefix := s.k.labelOf(ns, first, labels[first])
	counts := map[reevev1.TaskState]int64{}
	var rev int64
	from, end := prefix, prefixEnd(prefix)
	for read := 0; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(1000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(octx, from, opts...)
		cancel()
		if err != nil {
			return nil, 0, etcdErr(ctx, "count tasks by label", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if read += len(resp.Kvs); read > MaxLabelCount {
			return nil, 0, fmt.Errorf("label %s=%s: %w (more than %d live tasks)", first, labels[first], ErrTooManyToCount, MaxLabelCount)
		}
		for start := 0; start < len(resp.Kvs); start += 100 {
			part := resp.Kvs[start:min(start+100, len(resp.Kvs))]
			gets := make([]clientv3.Op, len(part))
			for i, kv := range part {
				p, err := parseCreated(string(kv.Key[len(prefix):]))
				if err != nil {
					return nil, 0, fmt.Errorf("store: label index key %q: %w", kv.Key, err)
				}
				gets[i] = clientv3.OpGet(s.k.task(ns, p.ID), clientv3.WithRev(rev))
			}
			octx, cancel := s.opCtx(ctx)
			r, err := s.c.Txn(octx).Then(gets...).Commit()
			cancel()
			if err != nil {
				return nil, 0, etcdErr(ctx, "count tasks by label", err)
			}
			for _, rr := range r.Responses {
				kvs := rr.GetResponseRange().GetKvs()
				if len(kvs) == 0 {
					continue // a key without its record: an older sweeper left it
				}
				t, err := listTask(kvs[0], true)
				if err != nil {
					return nil, 0, err
				}
				if (wf == "" || t.GetWorkflow().GetName() == wf) && hasLabels(t, labels) {
					counts[t.GetState()]++
				}
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return counts, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// hasLabels reports whether t has every one of labels.
func hasLabels(t *reevev1.Task, labels map[string]string) bool {
	for k, v := range labels {
		if got, ok := t.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}

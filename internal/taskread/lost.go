package taskread

import (
	"context"
	"time"
)

// lostBatch is how many tasks one round of Lost looks up: one etcd
// transaction (etcd's default limit is 128 operations per transaction),
// then one archive query for those etcd lacked.
const lostBatch = 100

// lostArchiveTimeout bounds one archive query of Lost.
const lostArchiveTimeout = 30 * time.Second

// Lost returns the ids of namespace ns, in the order given, that are
// neither in etcd nor in the archive: tasks acknowledged to a client and
// then lost. The one lost check of `reeve verify --expect-tasks`, the
// benchmark and the chaos test.
//
// For every batch of ids, etcd is read first (linearizable), then the
// archive for the ids etcd lacked: a task is written to the archive before
// it is deleted from etcd, so one that etcd lacked is in the archive when
// it is read after, unless it was lost (or the archive's retention dropped
// it). Without an archive, every id etcd lacks is lost. An archive that
// cannot answer fails the check (*ArchiveError): it does not say lost.
func (r *Reader) Lost(ctx context.Context, ns string, ids []string) ([]string, error) {
	var lost []string
	for start := 0; start < len(ids); start += lostBatch {
		part := ids[start:min(start+lostBatch, len(ids))]
		inEtcd, err := r.st.TasksExist(ctx, ns, part)
		if err != nil {
			return nil, err
		}
		var missing []string
		for _, id := range part {
			if !inEtcd[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, lostArchiveTimeout)
		has, err := r.InArchive(actx, ns, missing)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, id := range missing {
			if !has[id] {
				lost = append(lost, id)
			}
		}
	}
	return lost, nil
}

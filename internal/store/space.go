package store

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultQuotaBytes is etcd's default backend quota (2 GiB), assumed when a
// member does not report its own (etcd before 3.6).
const DefaultQuotaBytes = 2 << 30

// Space is how full etcd's backend is, as the fullest member reports it.
type Space struct {
	// InUse is the part of the database holding live data and history not
	// yet compacted (DbSizeInUse): what compaction and retention shrink.
	InUse int64
	// Size is the database file's high-water mark (DbSize), which etcd
	// compares with the quota; only a defragmentation shrinks it.
	Size int64
	// Quota is the member's backend quota in bytes.
	Quota int64
	// NoSpace is true while the cluster's NOSPACE alarm is raised: etcd then
	// refuses every write but deletes until an operator disarms it.
	NoSpace bool
	// Revision is the highest store revision the members reported: while
	// it has not moved, nothing was written.
	Revision int64
}

// Fraction is InUse over Quota.
func (s Space) Fraction() float64 {
	if s.Quota <= 0 {
		return 0
	}
	return float64(s.InUse) / float64(s.Quota)
}

// String describes the space for an operator.
func (s Space) String() string {
	return fmt.Sprintf("%.1f MiB of the %.1f MiB quota in use (%.0f%%; database file %.1f MiB)",
		float64(s.InUse)/(1<<20), float64(s.Quota)/(1<<20), 100*s.Fraction(), float64(s.Size)/(1<<20))
}

// Space reads every member's status and the cluster's alarms (two cheap
// maintenance requests per member, no key range). With an in-process client,
// which has no endpoints, it asks the one member it talks to.
func (s *Store) Space(ctx context.Context) (Space, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	eps := s.c.Endpoints()
	if len(eps) == 0 {
		eps = []string{""}
	}
	var out Space
	var lastErr error
	answered := 0
	for _, ep := range eps {
		st, err := s.c.Status(octx, ep)
		if err != nil {
			lastErr = err
			continue
		}
		answered++
		out.Revision = max(out.Revision, st.Header.GetRevision())
		quota := st.DbSizeQuota
		if quota <= 0 {
			quota = DefaultQuotaBytes
		}
		if out.Quota == 0 || float64(st.DbSizeInUse)/float64(quota) > out.Fraction() {
			out.InUse, out.Size, out.Quota = st.DbSizeInUse, st.DbSize, quota
		}
	}
	if answered == 0 {
		return Space{}, etcdErr(ctx, "etcd status", lastErr)
	}
	alarms, err := s.c.AlarmList(octx)
	if err != nil {
		return Space{}, etcdErr(ctx, "etcd alarms", err)
	}
	for _, a := range alarms.Alarms {
		if a.GetAlarm() == etcdserverpb.AlarmType_NOSPACE {
			out.NoSpace = true
		}
	}
	return out, nil
}

// Reclaim frees etcd space by itself: it compacts the history up to the
// current revision, defragments every member one at a time (a member
// blocks reads and writes while it defragments: a few hundred ms for a
// small database, seconds for gigabytes), and, when the database file is
// back under 90% of the quota, disarms the NOSPACE alarm. Watchers behind
// the compacted revision are canceled and re-list, as Reeve's do. It
// returns the space after.
func (s *Store) Reclaim(ctx context.Context) (Space, error) {
	octx, cancel := context.WithTimeout(ctx, 4*s.opTimeout)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.endedPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return Space{}, etcdErr(ctx, "reclaim: revision", err)
	}
	if _, err := s.c.Compact(octx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil &&
		!errors.Is(err, rpctypes.ErrCompacted) && !errors.Is(err, rpctypes.ErrGRPCCompacted) {
		return Space{}, etcdErr(ctx, "reclaim: compact", err)
	}
	eps := s.c.Endpoints()
	if len(eps) == 0 {
		// An in-process client talks to its one member, and etcd's
		// in-process maintenance server panics on Defragment: only a
		// defragmenter given by WithDefragmenter can do it.
		eps = nil
		if s.defrag != nil {
			if err := s.defrag(); err != nil {
				return Space{}, etcdErr(ctx, "reclaim: defragment", err)
			}
		}
	}
	for _, ep := range eps {
		if _, err := s.c.Defragment(octx, ep); err != nil {
			return Space{}, etcdErr(ctx, "reclaim: defragment "+ep, err)
		}
	}
	sp, err := s.Space(ctx)
	if err != nil {
		return Space{}, err
	}
	if sp.NoSpace && float64(sp.Size) < 0.9*float64(sp.Quota) {
		alarms, err := s.c.AlarmList(octx)
		if err != nil {
			return sp, etcdErr(ctx, "reclaim: alarms", err)
		}
		for _, a := range alarms.Alarms {
			if a.GetAlarm() != etcdserverpb.AlarmType_NOSPACE {
				continue
			}
			if _, err := s.c.AlarmDisarm(octx, (*clientv3.AlarmMember)(a)); err != nil {
				return sp, etcdErr(ctx, "reclaim: disarm", err)
			}
		}
		sp.NoSpace = false
	}
	return sp, nil
}

package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgserver"
	"github.com/reeve-org/reeve/internal/store"
)

// ArchivePG is the Config.ArchiveDSN that starts a throwaway PostgreSQL
// server for the run (internal/pgserver: initdb and pg_ctl in a temporary
// directory, as the user postgres when root), removed at the end. Followed
// by ?PARAMS, the parameters are added to the server's DSN
// (pg?pool_max_conns=32).
const ArchivePG = "pg"

// throwawayPG tells whether dsn is ArchivePG, alone or followed by
// ?PARAMS for the connection (pg?pool_max_conns=32), and returns PARAMS.
func throwawayPG(dsn string) (params string, ok bool) {
	if dsn == ArchivePG {
		return "", true
	}
	return strings.CutPrefix(dsn, ArchivePG+"?")
}

// LostCheckAll is how many acknowledged tasks the lost check looks up one
// by one at most; above it, it looks up a random LostSample of them.
const (
	LostCheckAll = 2_000_000
	LostSample   = 10_000
)

// etcdKeys names the store's keys the lost check and the archive wait
// read: the benchmarked schedulers run with the default prefix.
var etcdKeys = store.NewLayout(store.DefaultPrefix)

// openArchive opens the archive dsn names (nil and a no-op close when dsn
// is empty); ArchivePG first starts a throwaway server. label is the DSN
// without passwords, for the report.
func openArchive(ctx context.Context, dsn string) (a archive.Archive, label string, closeAll func(), err error) {
	if dsn == "" {
		return nil, "", func() {}, nil
	}
	stopPG := func() {}
	label = archive.Redact(dsn)
	if params, ok := throwawayPG(dsn); ok {
		srv, err := pgserver.Launch()
		if err != nil {
			return nil, "", nil, fmt.Errorf("start a throwaway PostgreSQL server for the archive: %w", err)
		}
		dsn, stopPG = srv.DSN("postgres"), srv.Close
		if params != "" {
			dsn += "&" + params
		}
		label = "pg: " + dsn
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err = archive.Open(octx, dsn)
	if err != nil {
		stopPG()
		return nil, "", nil, fmt.Errorf("archive %s: %w", label, err)
	}
	return a, label, func() { _ = a.Close(); stopPG() }, nil
}

// reportArchive fills the report's archive, etcd-at-the-end and lost
// figures, after the load: it waits for the archive (Config.ArchiveWait),
// reads the archive's growth since arch0 and etcd's tasks and space, and
// runs the lost check (Config.VerifyLost or an archive). The scheduler is
// still running.
func reportArchive(ctx context.Context, cfg Config, tg *target, arch archive.Archive, arch0 archive.Stats, counts submitCounts, rep *Report) error {
	// Its own time: a run cut short by MaxDuration still reports.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ArchiveWait+10*time.Minute)
	defer cancel()
	rep.Archive = arch != nil
	if arch != nil && cfg.ArchiveWait > 0 {
		start := time.Now()
		for time.Since(start) < cfg.ArchiveWait {
			n, err := countEtcdTasks(ctx, tg.etcd)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		rep.ArchiveWaitSec = math.Round(time.Since(start).Seconds()*10) / 10
	}
	if arch != nil {
		st, err := arch.Stats(ctx)
		if err != nil {
			return err
		}
		rep.ArchiveTasks = st.Tasks - arch0.Tasks
		if rep.ArchiveTasks > 0 {
			rep.ArchiveBytesPerTask = math.Round(float64(st.Bytes-arch0.Bytes) / float64(rep.ArchiveTasks))
		}
	}
	n, err := countEtcdTasks(ctx, tg.etcd)
	if err != nil {
		return err
	}
	rep.EtcdTasksAtEnd = n
	if tg.dbSize != nil {
		_, inUse := tg.dbSize()
		rep.EtcdDBInUseEndMB = math.Round(float64(inUse)/(1<<20)*10) / 10
		if n > 0 {
			rep.EtcdInUseBytesPerTask = math.Round(float64(inUse) / float64(n))
		}
	}
	if !cfg.VerifyLost && arch == nil {
		return nil
	}
	ids := counts.acked
	rep.LostSample = "all"
	if len(ids) > LostCheckAll {
		ids = make([]int64, LostSample)
		for i, j := range rand.Perm(len(counts.acked))[:LostSample] {
			ids[i] = counts.acked[j]
		}
		rep.LostSample = "random"
	}
	rep.LostChecked = len(ids)
	lost, err := checkLost(ctx, tg.etcd, arch, counts.runID, ids)
	if err != nil {
		return err
	}
	rep.Lost = len(lost)
	if len(lost) > 0 {
		rep.FirstLost = lost[0]
	}
	return nil
}

// countEtcdTasks returns how many task records etcd holds.
func countEtcdTasks(ctx context.Context, cli *clientv3.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, etcdKeys.Tasks(""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count tasks in etcd: %w", err)
	}
	return resp.Count, nil
}

// lostBatch is how many tasks one etcd transaction of the lost check looks
// up (etcd's default limit is 128 operations per transaction).
const lostBatch = 100

// checkLost returns the ids of the run's submissions idx (taskID(runID, i))
// found neither in etcd nor in the archive. etcd is read first, then the
// archive for the tasks etcd lacked: a task is written to the archive
// before it is deleted from etcd, so one that etcd lacked is in the
// archive when it is read after, unless it was lost.
func checkLost(ctx context.Context, cli *clientv3.Client, arch archive.Archive, runID string, idx []int64) ([]string, error) {
	var lost []string
	for start := 0; start < len(idx); start += lostBatch {
		part := idx[start:min(start+lostBatch, len(idx))]
		ids := make([]string, len(part))
		gets := make([]clientv3.Op, len(part))
		for k, i := range part {
			ids[k] = taskID(runID, i)
			gets[k] = clientv3.OpGet(etcdKeys.Task("default", ids[k]), clientv3.WithCountOnly())
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.Txn(tctx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("lost check: read etcd: %w", err)
		}
		var missing []string
		for k, id := range ids {
			if resp.Responses[k].GetResponseRange().GetCount() == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			continue
		}
		has := map[string]bool{}
		if arch != nil {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			has, err = arch.Has(actx, "default", missing)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("lost check: read the archive: %w", err)
			}
		}
		for _, id := range missing {
			if !has[id] {
				lost = append(lost, id)
			}
		}
	}
	return lost, nil
}

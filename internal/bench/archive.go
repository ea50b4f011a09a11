package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
)

// LostCheckAll is how many acknowledged tasks the lost check looks up one
// by one at most; above it, it looks up a random LostSample of them.
const (
	LostCheckAll = 2_000_000
	LostSample   = 10_000
)

// etcdKeys names the store's keys the archive wait reads: the benchmarked
// schedulers run with the default prefix.
var etcdKeys = store.NewLayout(store.DefaultPrefix)

// reportArchive fills the report's archive, etcd-at-the-end and lost
// figures, after the load: it waits for the archive (Config.ArchiveWait),
// reads the archive's growth since arch0 and etcd's tasks and space, and
// runs the lost check (Config.VerifyLost or an archive). The scheduler is
// still running.
func reportArchive(ctx context.Context, cfg Config, tg *target, tasks *taskread.Reader, arch0 taskread.Stats, counts submitCounts, rep *Report) error {
	// Its own time: a run cut short by MaxDuration still reports.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ArchiveWait+10*time.Minute)
	defer cancel()
	rep.Archive = tasks.HasArchive()
	if rep.Archive && cfg.ArchiveWait > 0 {
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
	if rep.Archive {
		st, err := tasks.ArchiveStats(ctx)
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
	if !cfg.VerifyLost && !rep.Archive {
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
	names := make([]string, len(ids))
	for k, i := range ids {
		names[k] = taskID(counts.runID, i)
	}
	lost, err := tasks.Lost(ctx, "default", names)
	if err != nil {
		return fmt.Errorf("lost check: %w", err)
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

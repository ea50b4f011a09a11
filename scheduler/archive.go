package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Finished tasks move from etcd to the archive (WithArchive; docs/archive.md):
//
//   - `grace` after it ended, a task that did not fail is written to the
//     archive and then deleted from etcd with its index keys (the delete
//     compares the record's revision, so a task changed meanwhile stays);
//   - a FAILED task stays in etcd for the retention (WithRetention), the
//     window in which operators retry or compensate it, then moves the
//     same way;
//   - reads (GetTask, WatchTask, ListTasks, CountTasks, SubmitTask's
//     idempotency) look in etcd first and then in the archive, through
//     s.tasks (internal/taskread). A task is written to the archive before
//     it leaves etcd, so one that a read did not find in etcd is in the
//     archive by the time the read looks there.
//
// Without an archive, terminal tasks are deleted after the retention.

// WithArchive keeps finished tasks in a: they move there grace after they
// end (FAILED ones after the retention). Default: no archive.
//
// With an archive, a task that ends SUCCEEDED, COMPENSATED, or CANCELED with
// nothing left to undo keeps in etcd only its record and ended key until it
// moves (store.WithEndedUnindexed): lists and counts find it through the
// task reader.
func WithArchive(a archive.Archive, grace time.Duration) Option {
	return func(o *options) {
		o.archive, o.archiveGrace = a, grace
		o.storeOpts = append(o.storeOpts, store.WithEndedUnindexed(a != nil))
	}
}

// WithArchiveRetention sets how long the archive keeps a task after it
// ended; default 30 days (0 keeps them forever).
func WithArchiveRetention(d time.Duration) Option {
	return func(o *options) { o.archiveRetention = d }
}

// WithArchiveInterval sets how often tasks past their grace are moved to
// the archive; default 5s.
func WithArchiveInterval(d time.Duration) Option {
	return func(o *options) { o.archiveInterval = d }
}

// archiveBatch is how many ended keys one archive pass examines per call:
// the tasks of one archive write.
const archiveBatch = 500

// archiveWriteTimeout bounds one archive write (of up to archiveBatch
// tasks); the tasks of a write that failed stay in etcd for the next pass.
const archiveWriteTimeout = 30 * time.Second

// archiveDropEvery is how often a scheduler drops what the archive's
// retention has passed.
const archiveDropEvery = time.Hour

// mover ends the stay of finished tasks in etcd: the retention sweep
// deletes terminal tasks past the retention (moves them to the archive when
// there is one), and with an archive a second loop moves the tasks that did
// not fail once their grace passed (this file).
type mover struct {
	opts  *options
	store *store.Store
	log   *slog.Logger
	tel   *instruments
	// caughtUp is the grace cutoff (unix ns) of the last archive pass that
	// reached the end of the tasks due (reeve.archive.lag).
	caughtUp atomic.Int64
	// namespaces: those whose tasks moved, whose alerts the retention sweep
	// deletes too (sweepArchivedAlerts).
	namespaces metNamespaces
}

// run sweeps and moves until ctx ends.
func (m *mover) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { m.sweep(ctx) })
	if m.opts.archive != nil {
		wg.Go(func() { m.archiveTasks(ctx) })
	}
	wg.Wait()
}

// sweep deletes terminal tasks past their retention (moves them to the
// archive when there is one), and alerts raised before it.
func (m *mover) sweep(ctx context.Context) {
	m.sweepEvery(ctx, m.opts.sweepInterval, "sweep ended tasks", func() store.Sweep {
		before := m.opts.clock.Now().Add(-m.opts.retention)
		sw := store.Sweep{Before: before, AlertsBefore: before}
		if m.opts.archive != nil {
			sw.Keep = m.keepInArchive
		}
		return sw
	}, func() {
		if m.opts.archive != nil {
			m.sweepArchivedAlerts(ctx)
		}
	})
}

// sweepEvery runs passes of store.SweepEnded every interval until ctx
// ends: each pass deletes what sweepOf describes (its From and Limit set
// here), page after page, and then calls after. A pass continues where the
// last one ended (the cursor), and starts again from the beginning of the
// ended index every sweepRescanEvery passes, for what a
// cursor passes by: a task whose record changed while it was swept, or one
// ended by a scheduler whose clock is behind this one's. caughtUp, when
// set, is called with the cutoff of a pass that reached the end.
func (m *mover) sweepEvery(ctx context.Context, interval time.Duration, what string, sweepOf func() store.Sweep, after func(), caughtUp ...func(time.Time)) {
	t := m.opts.clock.NewTicker(interval)
	defer t.Stop()
	var cursor string
	for pass := 0; ; pass++ {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if pass%sweepRescanEvery == 0 {
			cursor = ""
		}
		for {
			sw := sweepOf()
			sw.From, sw.Limit = cursor, archiveBatch
			n, next, more, err := m.store.SweepEnded(ctx, sw)
			if err != nil {
				// The next pass starts again where this page did (a
				// rescan of the whole index under load, after a timeout,
				// fell further behind).
				if !errors.Is(err, context.Canceled) {
					m.log.Warn(what, "err", err)
				}
				break
			}
			cursor = next
			if n > 0 {
				m.log.Debug(what, "count", n)
			}
			if !more {
				for _, f := range caughtUp {
					f(sw.Before)
				}
				break
			}
		}
		after()
	}
}

// sweepRescanEvery is how many sweeps pass between two that start from the
// beginning of the ended index.
const sweepRescanEvery = 10

// archiveTasks moves tasks past their grace to the archive until ctx ends,
// and drops from the archive what its retention passed.
func (m *mover) archiveTasks(ctx context.Context) {
	var lastDrop time.Time
	m.sweepEvery(ctx, m.opts.archiveInterval, "archive ended tasks; they stay in etcd until the archive takes them", func() store.Sweep {
		return store.Sweep{Before: m.opts.clock.Now().Add(-m.opts.archiveGrace), Skip: isFailed, Stay: leftToUndo, Keep: m.keepInArchive}
	}, func() {
		now := m.opts.clock.Now()
		if m.opts.archiveRetention <= 0 || now.Sub(lastDrop) < archiveDropEvery {
			return
		}
		lastDrop = now
		n, err := m.opts.archive.DropEndedBefore(ctx, now.Add(-m.opts.archiveRetention))
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			m.log.Warn("drop archived tasks past the archive retention", "err", err)
			lastDrop = time.Time{}
		case n > 0:
			m.log.Info("dropped archived tasks past the archive retention", "count", n)
		}
	}, func(cutoff time.Time) { m.caughtUp.Store(cutoff.UnixNano()) })
}

// isFailed and leftToUndo tell the tasks an operator may still act on,
// which stay in etcd for the retention instead of the grace: FAILED ones
// (told from the ended key), and CANCELED ones that still hold work to undo
// (from the record: taskstate.LeftToUndo).
func isFailed(st reevev1.TaskState) bool { return st == reevev1.TaskState_TASK_STATE_FAILED }

func leftToUndo(t *reevev1.Task) bool {
	return t.GetState() == reevev1.TaskState_TASK_STATE_CANCELED && taskstate.LeftToUndo(t)
}

// keepInArchive writes records to the archive; it returns once they are
// durable there.
func (m *mover) keepInArchive(ctx context.Context, recs []*storev1.TaskRecord) error {
	tasks := make([]archive.Task, 0, len(recs))
	m.namespaces.mu.Lock()
	for _, rec := range recs {
		m.namespaces.met[rec.GetTask().GetNamespace()] = m.opts.clock.Now()
	}
	m.namespaces.mu.Unlock()
	for _, rec := range recs {
		at, err := archiveTask(rec)
		if err != nil {
			return err
		}
		tasks = append(tasks, at)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, archiveWriteTimeout)
	defer cancel()
	err := m.opts.archive.Put(ctx, tasks)
	m.tel.archived(ctx, len(tasks), time.Since(start), err)
	if err != nil {
		return err
	}
	// Before they leave etcd: the deduplication window (dedup.go). Written
	// whatever this scheduler's window, for the other schedulers'.
	fps := make([]uint64, len(recs))
	for i, rec := range recs {
		fps[i] = store.Fingerprint(rec.GetTask().GetNamespace(), rec.GetTask().GetId())
	}
	return m.store.PutMoved(ctx, m.opts.clock.Now(), fps)
}

// archiveTask is rec as the archive keeps it.
func archiveTask(rec *storev1.TaskRecord) (archive.Task, error) {
	t := rec.GetTask()
	full, err := proto.Marshal(rec)
	if err != nil {
		return archive.Task{}, err
	}
	sum := proto.Clone(t).(*reevev1.Task)
	basicView(sum)
	summary, err := proto.Marshal(sum)
	if err != nil {
		return archive.Task{}, err
	}
	return archive.Task{
		Namespace:  t.GetNamespace(),
		ID:         t.GetId(),
		Workflow:   t.GetWorkflow().GetName(),
		Labels:     t.GetLabels(),
		State:      t.GetState(),
		CreateTime: t.GetCreateTime().AsTime(),
		EndTime:    t.GetEndTime().AsTime(),
		Summary:    summary,
		Record:     full,
	}, nil
}

// archivedSubmission returns the archived record of the task a submission
// with a chosen id names, or nil when the task is not archived: in etcd
// (createTask answers), or new. etcd is read first: a task is archived
// before it leaves etcd, so one etcd did not hold when it was read is in
// the archive when it is read next, unless it never existed.
func (svc *schedulerService) archivedSubmission(ctx context.Context, req *reevev1.SubmitTaskRequest) (*storev1.TaskRecord, error) {
	if svc.opts.archive == nil {
		return nil, nil
	}
	ns, id := req.GetNamespace(), req.GetTaskId()
	inEtcd, rev, err := svc.store.TaskExists(ctx, ns, id)
	if err != nil || inEtcd {
		return nil, err // in etcd (createTask answers), or etcd could not say
	}
	archived, err := svc.lookups.archived(ctx, ns, id)
	if err != nil {
		return nil, svc.archiveUnavailable(ctx, ns, id, rev, err)
	}
	if !archived {
		return nil, nil
	}
	rec, err := svc.tasks.Archived(ctx, ns, id)
	if errors.Is(err, taskread.ErrNotArchived) {
		return nil, nil // dropped by the archive's retention since
	}
	return rec, err
}

// archiveUnavailable decides a submission with a chosen id that etcd did
// not hold at revision rev while the archive could not be asked (err): it
// is new (nil) when no task with that id moved to the archive within the
// deduplication window; otherwise the archive's error stands.
func (svc *schedulerService) archiveUnavailable(ctx context.Context, ns, id string, rev int64, err error) error {
	if svc.dedup == nil || ctx.Err() != nil {
		return err
	}
	moved, werr := svc.dedup.moved(ctx, ns, id, rev)
	if werr != nil || moved {
		svc.tel.windowAnswer(ctx, false)
		return err
	}
	svc.tel.windowAnswer(ctx, true)
	return nil
}

// metNamespaces are the namespaces of tasks moved to the archive, with when
// a task of theirs last moved.
type metNamespaces struct {
	mu  sync.Mutex
	met map[string]time.Time
}

// sweepArchivedAlerts deletes the alerts raised before the retention in
// the namespaces whose tasks moved to the archive within the retention
// (and a margin): alerts go after the retention, as without an archive.
// The retention sweep deletes a namespace's old alerts only when it meets
// an old ended task there, and with an archive only FAILED ones stay that
// long; a task that failed, raised an alert and was retried to success
// moves after the grace. After a restart a namespace is swept again once a
// task of it moves.
func (m *mover) sweepArchivedAlerts(ctx context.Context) {
	now := m.opts.clock.Now()
	var nss []string
	m.namespaces.mu.Lock()
	for ns, at := range m.namespaces.met {
		if now.Sub(at) > m.opts.retention+m.opts.archiveGrace+2*m.opts.sweepInterval {
			delete(m.namespaces.met, ns)
			continue
		}
		nss = append(nss, ns)
	}
	m.namespaces.mu.Unlock()
	slices.Sort(nss)
	if err := m.store.SweepAlerts(ctx, nss, now.Add(-m.opts.retention)); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Warn("sweep alerts of archived tasks", "err", err)
	}
}

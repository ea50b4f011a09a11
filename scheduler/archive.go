package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// archiveTasks moves tasks past their grace to the archive until ctx ends,
// and drops from the archive what its retention passed.
func (s *Server) archiveTasks(ctx context.Context) {
	var lastDrop time.Time
	s.sweepEvery(ctx, s.opts.archiveInterval, "archive ended tasks; they stay in etcd until the archive takes them", func() store.Sweep {
		return store.Sweep{Before: s.opts.clock.Now().Add(-s.opts.archiveGrace), Skip: isFailed, Keep: s.keepInArchive}
	}, func() {
		now := s.opts.clock.Now()
		if s.opts.archiveRetention <= 0 || now.Sub(lastDrop) < archiveDropEvery {
			return
		}
		lastDrop = now
		n, err := s.opts.archive.DropEndedBefore(ctx, now.Add(-s.opts.archiveRetention))
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			s.log.Warn("drop archived tasks past the archive retention", "err", err)
			lastDrop = time.Time{}
		case n > 0:
			s.log.Info("dropped archived tasks past the archive retention", "count", n)
		}
	}, func(cutoff time.Time) { s.archiveCaughtUp.Store(cutoff.UnixNano()) })
}

func isFailed(st reevev1.TaskState) bool { return st == reevev1.TaskState_TASK_STATE_FAILED }

// keepInArchive writes records to the archive; it returns once they are
// durable there.
func (s *Server) keepInArchive(ctx context.Context, recs []*storev1.TaskRecord) error {
	tasks := make([]archive.Task, 0, len(recs))
	s.archivedNamespaces.mu.Lock()
	for _, rec := range recs {
		s.archivedNamespaces.met[rec.GetTask().GetNamespace()] = s.opts.clock.Now()
	}
	s.archivedNamespaces.mu.Unlock()
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
	err := s.opts.archive.Put(ctx, tasks)
	s.tel.archived(ctx, len(tasks), time.Since(start), err)
	if err != nil {
		return err
	}
	// Before they leave etcd: the deduplication window (dedup.go). Written
	// whatever this scheduler's window, for the other schedulers'.
	fps := make([]uint64, len(recs))
	for i, rec := range recs {
		fps[i] = store.Fingerprint(rec.GetTask().GetNamespace(), rec.GetTask().GetId())
	}
	return s.store.PutMoved(ctx, s.opts.clock.Now(), fps)
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
		State:      t.GetState(),
		CreateTime: t.GetCreateTime().AsTime(),
		EndTime:    t.GetEndTime().AsTime(),
		Summary:    summary,
		Record:     full,
	}, nil
}

// archivedRecord returns the record of an archived task, or notFound (the
// store's not-found error) when there is no archive or it does not hold the
// task.
func (s *Server) archivedRecord(ctx context.Context, ns, id string, notFound error) (*storev1.TaskRecord, error) {
	rec, err := s.tasks.Archived(ctx, ns, id)
	if errors.Is(err, taskread.ErrNotArchived) {
		return nil, notFound
	}
	return rec, err
}

// getTask returns a task's record from etcd or, when it is not there, from
// the archive.
func (s *Server) getTask(ctx context.Context, ns, id string) (*storev1.TaskRecord, error) {
	rec, _, err := s.tasks.Get(ctx, ns, id)
	return rec, err
}

// notInEtcd is the error of an action on a task etcd does not hold:
// TASK_TERMINAL when the archive holds it (it ended and moved there), the
// store's not-found error otherwise.
func (s *Server) notInEtcd(ctx context.Context, ns, id string, notFound error) error {
	if _, err := s.archivedRecord(ctx, ns, id, notFound); err != nil {
		return err
	}
	return fmt.Errorf("%w: task %q ended and was moved to the archive", taskstate.ErrTerminal, id)
}

// archivedSubmission returns the archived record of the task a submission
// with a chosen id names, or nil when the task is not archived: in etcd
// (createTask answers), or new. etcd is read first: a task is archived
// before it leaves etcd, so one etcd did not hold when it was read is in
// the archive when it is read next, unless it never existed.
func (s *Server) archivedSubmission(ctx context.Context, req *reevev1.SubmitTaskRequest) (*storev1.TaskRecord, error) {
	if s.opts.archive == nil {
		return nil, nil
	}
	ns, id := req.GetNamespace(), req.GetTaskId()
	inEtcd, rev, err := s.store.TaskExists(ctx, ns, id)
	if err != nil || inEtcd {
		return nil, err // in etcd (createTask answers), or etcd could not say
	}
	archived, err := s.lookups.archived(ctx, ns, id)
	if err != nil {
		return nil, s.archiveUnavailable(ctx, ns, id, rev, err)
	}
	if !archived {
		return nil, nil
	}
	rec, err := s.tasks.Archived(ctx, ns, id)
	if errors.Is(err, taskread.ErrNotArchived) {
		return nil, nil // dropped by the archive's retention since
	}
	return rec, err
}

// archiveUnavailable decides a submission with a chosen id that etcd did
// not hold at revision rev while the archive could not be asked (err): it
// is new (nil) when no task with that id moved to the archive within the
// deduplication window; otherwise the archive's error stands.
func (s *Server) archiveUnavailable(ctx context.Context, ns, id string, rev int64, err error) error {
	if s.dedup == nil || ctx.Err() != nil {
		return err
	}
	moved, werr := s.dedup.moved(ctx, ns, id, rev)
	if werr != nil || moved {
		s.tel.windowAnswer(ctx, false)
		return err
	}
	s.tel.windowAnswer(ctx, true)
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
func (s *Server) sweepArchivedAlerts(ctx context.Context) {
	now := s.opts.clock.Now()
	var nss []string
	s.archivedNamespaces.mu.Lock()
	for ns, at := range s.archivedNamespaces.met {
		if now.Sub(at) > s.opts.retention+s.opts.archiveGrace+2*s.opts.sweepInterval {
			delete(s.archivedNamespaces.met, ns)
			continue
		}
		nss = append(nss, ns)
	}
	s.archivedNamespaces.mu.Unlock()
	slices.Sort(nss)
	if err := s.store.SweepAlerts(ctx, nss, now.Add(-s.opts.retention)); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("sweep alerts of archived tasks", "err", err)
	}
}

package taskread

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// ErrNotArchived is returned by Archived for a task the archive does not
// hold, or when there is no archive.
var ErrNotArchived = errors.New("taskread: task not in the archive")

// ArchiveError marks an archive that could not answer (or a row of it that
// does not decode). A read the caller gave up on (context canceled or past
// its deadline) is not one: its context error is returned as is.
type ArchiveError struct{ Err error }

func (e *ArchiveError) Error() string { return "archive unavailable: " + e.Err.Error() }
func (e *ArchiveError) Unwrap() error { return e.Err }

// archiveErr wraps an error of the archive in an *ArchiveError, except nil
// and the caller's own cancellation or deadline.
func archiveErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &ArchiveError{err}
}

// Reader reads tasks from etcd and, when it has one, the archive. It is
// safe for concurrent use; it holds no state of its own.
type Reader struct {
	st     *store.Store
	a      archive.Archive
	closeA bool // Open opened a: Close closes it
}

// New returns a reader of st and a; a nil a is no archive (etcd alone). The
// caller keeps owning both.
func New(st *store.Store, a archive.Archive) *Reader {
	return &Reader{st: st, a: a}
}

// Open returns a reader of st and of the archive dsn names (archive.Open's
// forms; "" is no archive), which the reader owns: Close closes it.
func Open(ctx context.Context, st *store.Store, dsn string) (*Reader, error) {
	if dsn == "" {
		return New(st, nil), nil
	}
	a, err := archive.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", archive.Redact(dsn), err)
	}
	return &Reader{st: st, a: a, closeA: true}, nil
}

// Close closes the archive Open opened; a reader from New leaves its
// archive to the caller.
func (r *Reader) Close() error {
	if r.closeA {
		return r.a.Close()
	}
	return nil
}

// HasArchive reports whether the reader reads an archive.
func (r *Reader) HasArchive() bool { return r.a != nil }

// Get returns a task's record from etcd or, when etcd does not hold it, from
// the archive (archived true). A task in neither is the store's not-found
// error (store.IsNotFound).
func (r *Reader) Get(ctx context.Context, ns, id string) (rec *storev1.TaskRecord, archived bool, err error) {
	v, err := r.st.GetTask(ctx, ns, id)
	if store.IsNotFound(err) {
		rec, aerr := r.Archived(ctx, ns, id)
		if errors.Is(aerr, ErrNotArchived) {
			return nil, false, err
		}
		return rec, aerr == nil, aerr
	}
	if err != nil {
		return nil, false, err
	}
	return v.Record, false, nil
}

// Archived returns the archive's record of a task, or ErrNotArchived. It
// reads the archive alone: call it after etcd answered that it does not hold
// the task (a read, a watch that ended with the task's deletion, an update
// of a task not found), as Get does.
func (r *Reader) Archived(ctx context.Context, ns, id string) (*storev1.TaskRecord, error) {
	if r.a == nil {
		return nil, ErrNotArchived
	}
	at, err := r.a.Get(ctx, ns, id)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, ErrNotArchived
	}
	if err != nil {
		return nil, archiveErr(err)
	}
	rec := &storev1.TaskRecord{}
	if err := proto.Unmarshal(at.Record, rec); err != nil {
		return nil, archiveErr(err)
	}
	return rec, nil
}

// Exists reports whether etcd or, when etcd does not hold it, the archive
// holds the task.
func (r *Reader) Exists(ctx context.Context, ns, id string) (bool, error) {
	inEtcd, _, err := r.st.TaskExists(ctx, ns, id)
	if err != nil || inEtcd {
		return inEtcd, err
	}
	has, err := r.InArchive(ctx, ns, []string{id})
	return has[id], err
}

// InArchive returns which of the given ids of namespace ns the archive
// holds: the map holds those only, each true; none without an archive. It
// reads the archive alone (one query): call it after etcd answered.
func (r *Reader) InArchive(ctx context.Context, ns string, ids []string) (map[string]bool, error) {
	if r.a == nil || len(ids) == 0 {
		return map[string]bool{}, nil
	}
	has, err := r.a.Has(ctx, ns, ids)
	if err != nil {
		return nil, archiveErr(err)
	}
	return has, nil
}

// Count returns a namespace's tasks per state (of workflow wf when not
// empty), etcd's and the archive's added, and the etcd revision counted at.
// Every state is in the map. A task moving to the archive (written there,
// not yet deleted from etcd) is counted twice for that moment. With an
// archive, etcd's count includes the tasks that ended without created keys
// (store.CountEndedUnindexed, at the same revision); past its budget the
// count fails as when the archive cannot answer.
// CountLabeled is Count of the tasks that have every one of labels: from
// the label index in etcd (store.CountByLabels: the tasks that ended
// unindexed keep their label keys) and the archive.
func (r *Reader) CountLabeled(ctx context.Context, ns, wf string, labels map[string]string) (map[reevev1.TaskState]int64, int64, error) {
	counts, rev, err := r.st.CountByLabels(ctx, ns, wf, labels)
	if err != nil || r.a == nil {
		return counts, rev, err
	}
	archived, err := r.a.CountLabeled(ctx, ns, wf, labels)
	if err != nil {
		return nil, 0, archiveErr(err)
	}
	for st, n := range archived {
		counts[st] += n
	}
	return counts, rev, nil
}

func (r *Reader) Count(ctx context.Context, ns, wf string) (map[reevev1.TaskState]int64, int64, error) {
	counts, rev, err := r.st.CountTasksByState(ctx, ns, wf)
	if err != nil || r.a == nil {
		return counts, rev, err
	}
	unindexed, err := r.st.CountEndedUnindexed(ctx, ns, wf, rev)
	if errors.Is(err, store.ErrEndedBacklog) {
		return nil, 0, &ArchiveError{err}
	}
	if err != nil {
		return nil, 0, err
	}
	for st, n := range unindexed {
		counts[st] += n
	}
	archived, err := r.a.Count(ctx, ns, wf)
	if err != nil {
		return nil, 0, archiveErr(err)
	}
	for st, n := range archived {
		counts[st] += n
	}
	return counts, rev, nil
}

// Stats is what an archive holds (archive.Stats).
type Stats = archive.Stats

// ArchiveStats reports the archive's size; zero without an archive.
func (r *Reader) ArchiveStats(ctx context.Context) (Stats, error) {
	if r.a == nil {
		return Stats{}, nil
	}
	st, err := r.a.Stats(ctx)
	return st, archiveErr(err)
}

// Package archive keeps finished tasks after they leave etcd: etcd holds
// live work, the archive holds history (docs/archive.md).
//
// An Archive is a table of tasks keyed by (namespace, id). Each row has the
// columns lists filter and sort on, the task in basic view (Summary: what a
// list page returns) and the whole store record (Record: what GetTask
// returns). Two implementations share one contract and one test suite:
// PostgreSQL (Open with a postgres:// DSN; several schedulers share it) and
// SQLite in a file (Open with sqlite:PATH; one process, the dev default).
package archive

import (
	"context"
	"errors"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// ErrNotFound is returned by Get for a task the archive does not hold.
var ErrNotFound = errors.New("archive: task not found")

// Task is one archived task.
type Task struct {
	Namespace string
	ID        string
	Workflow  string
	State     reevev1.TaskState
	// CreateTime and EndTime are kept to the nanosecond: lists order by
	// CreateTime exactly as etcd's created indexes do.
	CreateTime time.Time
	EndTime    time.Time
	// Summary is the reeve.v1.Task in basic view, encoded (what list pages
	// return); Record is the whole storev1.TaskRecord, encoded.
	Summary []byte
	Record  []byte
	// Labels are the task's labels (reeve.v1.Task.labels): a list can
	// select by them.
	Labels map[string]string
}

// Position is where a list page ended: the create time and id of its last
// task. Lists are newest first: create time descending, ties by id ascending.
type Position struct {
	Created time.Time
	ID      string
}

// Query selects a page of archived tasks of one namespace, newest first.
type Query struct {
	Namespace string
	// State, when set, keeps tasks in that state.
	State reevev1.TaskState
	// Workflow, when set, keeps tasks of that workflow (exact name).
	Workflow string
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound the
	// create time when not zero.
	CreatedAfter, CreatedBefore time.Time
	// IDPrefix, when set, keeps tasks whose id starts with it.
	IDPrefix string
	// Labels, when set, keeps tasks that have every one of them.
	Labels map[string]string
	// After, when set, continues after this position (exclusive).
	After *Position
	// Limit is the most tasks returned (at least 1).
	Limit int
	// Full returns Record filled; otherwise only Summary (and the columns)
	// is read.
	Full bool
}

// Stats describes what an archive holds.
type Stats struct {
	Tasks int64
	// Bytes is the archive's size on disk (table, indexes), as the
	// database reports it.
	Bytes int64
}

// Archive is where finished tasks are kept. Every method is safe for
// concurrent use.
type Archive interface {
	// Put writes tasks, replacing any archived task of the same namespace
	// and id. It returns once the write is durable (committed).
	Put(ctx context.Context, tasks []Task) error
	// Get returns one task with Record and Summary, or ErrNotFound.
	Get(ctx context.Context, ns, id string) (Task, error)
	// List returns up to q.Limit tasks matching q, newest first.
	List(ctx context.Context, q Query) ([]Task, error)
	// Count returns the number of archived tasks of namespace ns (and of
	// workflow wf when not empty) per state; states without tasks absent.
	Count(ctx context.Context, ns, wf string) (map[reevev1.TaskState]int64, error)
	// CountLabeled is Count of the tasks that have every one of labels.
	CountLabeled(ctx context.Context, ns, wf string, labels map[string]string) (map[reevev1.TaskState]int64, error)
	// Has returns which of the given ids of namespace ns are archived: the
	// map holds those only, each true.
	Has(ctx context.Context, ns string, ids []string) (map[string]bool, error)
	// DropEndedBefore deletes tasks that ended before t (PostgreSQL: whole
	// days, dropped as partitions) and returns how many went.
	DropEndedBefore(ctx context.Context, t time.Time) (int64, error)
	// Stats reports the archive's size.
	Stats(ctx context.Context) (Stats, error)
	// Ping checks the archive is reachable.
	Ping(ctx context.Context) error
	Close() error
}

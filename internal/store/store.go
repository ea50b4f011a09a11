// Package store owns Reeve's state in etcd: the key layout (keys.go), task
// records with their derived indexes, workflow definitions, and the watches
// and range reads the scheduler and supervisor use. Every write is one etcd
// transaction with a compare; no etcd type leaves the package except the
// clientv3.Cmp used for fencing.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

var (
	// ErrNotFound means the task or workflow does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrAlreadyExists means a task with that id exists with another request.
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrConflict means a guarded write kept losing to concurrent writers.
	ErrConflict = errors.New("store: conflict")
	// ErrFenced means a fence compare (e.g. a supervisor's leadership) failed:
	// the caller lost the right to write.
	ErrFenced = errors.New("store: fenced")
	// ErrUnavailable means etcd did not answer in time or has no leader.
	ErrUnavailable = errors.New("store: etcd unavailable")
	// ErrTooLarge means a record exceeds etcd's request size limit.
	ErrTooLarge = errors.New("store: record too large")
	// ErrNoSpace means etcd reached its space quota; only reads and deletes work.
	ErrNoSpace = errors.New("store: etcd out of space")
	// ErrOverloaded means a new task was refused because too many writes
	// already wait for etcd (see WithMaxQueuedWrites); retry later.
	ErrOverloaded = errors.New("store: overloaded")
	// ErrTooManyOps means one task write needs more operations than etcd
	// allows in one transaction (--max-txn-ops, default 128). It is not
	// retryable: the same write always needs as many. Workflows are checked
	// against the limit when registered (CheckWorkflowOps), so it means the
	// limit is lower than the store was told (WithMaxTxnOps).
	ErrTooManyOps = errors.New("store: transaction exceeds etcd's operation limit")
	// ErrStaleWorkflow means CreateTaskOfLatest found a newer version of the
	// task's workflow registered: nothing was written.
	ErrStaleWorkflow = errors.New("store: a newer workflow version exists")
)

// NotFoundError names what was not found; it matches ErrNotFound.
type NotFoundError struct {
	// What says it in words: `task "t-1" in namespace "default"`.
	What string
	// Kind is KindTask, KindWorkflow or KindAlert; Namespace and Name
	// (the task id, workflow name or alert id) name it, when known.
	Kind, Namespace, Name string
}

// The kinds of records a NotFoundError names.
const (
	KindTask     = "task"
	KindWorkflow = "workflow"
	KindAlert    = "alert"
)

func (e *NotFoundError) Error() string        { return e.What + " not found" }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

func notFound(kind, ns, name, format string, args ...any) error {
	return &NotFoundError{What: fmt.Sprintf(format, args...), Kind: kind, Namespace: ns, Name: name}
}

// Store reads and writes Reeve state in etcd. It is safe for concurrent use.
type Store struct {
	c         *clientv3.Client
	k         keys
	opTimeout time.Duration

	maxBatch, maxCommitters, cacheSize int
	maxQueued                          int
	commitWindow                       time.Duration
	maxTxnOps                          int
	compressRecords                    bool         // WithRecordCompression
	endedUnindexed                     bool         // WithEndedUnindexed
	defrag                             func() error // WithDefragmenter
	commits                            *committer
	schedCommits                       *scheduleCommitter // schedulebatch.go
	cache                              *recordCache
	workflows                          *workflowCache
	txns, taskWrites                   atomic.Int64
	scheduleTxns                       atomic.Int64 // batches of schedule writes committed (schedulebatch.go)
	meters                             metric.MeterProvider
	metrics                            storeMetrics
	log                                *slog.Logger     // WithLogger
	unknown                            *unknownReporter // records of unknown versions (versions.go)
	layoutChecked                      atomic.Bool      // AwaitLayout succeeded
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix; default "/reeve/". Several Reeve
// installations can share one etcd under different prefixes.
func WithPrefix(p string) Option { return func(s *Store) { s.k.prefix = p } }

// WithOpTimeout bounds every etcd request; default 5s. A request that runs
// out of time fails with ErrUnavailable.
func WithOpTimeout(d time.Duration) Option { return func(s *Store) { s.opTimeout = d } }

// WithGroupCommit bounds group commit (see batch.go): at most maxBatch task
// writes per etcd transaction (1 to 100; default 64; etcd refuses more than
// 128 operations in one list, and 128 nested transactions already fail) and at most
// maxCommitters transactions in flight (default 4). WithGroupCommit(1, n)
// commits every write in its own transaction.
func WithGroupCommit(maxBatch, maxCommitters int) Option {
	return func(s *Store) {
		s.maxBatch = min(max(maxBatch, 1), 100)
		s.maxCommitters = max(maxCommitters, 1)
	}
}

// WithCommitWindow sets the adaptive commit window (see window.go); default
// 1ms, 0 turns it off. When task writes arrive less than d apart, a
// committer about to cut a batch of fewer than a quarter of the batch size
// (WithGroupCommit) waits until its oldest write has waited d, or until the
// batch fills to that quarter, so that the writes share one etcd
// transaction. An idle store, or one with a queue, commits at once.
func WithCommitWindow(d time.Duration) Option {
	return func(s *Store) { s.commitWindow = max(d, 0) }
}

// WithDefragmenter gives a store whose client talks to etcd in process
// (no endpoints) the way to defragment that member (Reclaim); without it
// such a store compacts but does not defragment. A store with endpoints
// defragments each through its client and ignores this.
func WithDefragmenter(f func() error) Option { return func(s *Store) { s.defrag = f } }

// WithMaxTxnOps tells the store etcd's limit on the operations of one
// transaction list (etcd's --max-txn-ops; default 128, the etcd default).
// Group commit cuts its batches to fit it, and CheckWorkflowOps refuses
// workflows whose widest transition would exceed it. Set it only to the
// value every etcd member runs with.
func WithMaxTxnOps(n int) Option { return func(s *Store) { s.maxTxnOps = max(n, minTxnOps) } }

// WithMaxQueuedWrites refuses new tasks (ErrOverloaded) while n task writes
// wait for a commit; default 10,000, 0 never refuses. Updates of existing
// tasks (claims, results, recovery) always queue: they drain the backlog.
// Without a bound, an open-loop client faster than etcd grows the queue, and
// the memory holding it, without limit.
func WithMaxQueuedWrites(n int) Option { return func(s *Store) { s.maxQueued = max(n, 0) } }

// WithRecordCache sets how many live task records the store keeps to skip
// the read before an update; default 10,000, 0 turns the cache off. A stale
// entry costs one lost compare and a retry, never a wrong write.
func WithRecordCache(n int) Option { return func(s *Store) { s.cacheSize = max(n, 0) } }

// WithRecordCompression makes the store write task records compressed
// (recordcodec.go): about a third of their size for small records, less
// written to etcd on every task transition. Reading both formats is always
// on; turn writing on only once every process that reads this etcd
// (schedulers, supervisors, reeve verify) runs a Reeve that reads them.
func WithRecordCompression(on bool) Option { return func(s *Store) { s.compressRecords = on } }

// New returns a Store using c. The caller keeps ownership of c.
func New(c *clientv3.Client, opts ...Option) *Store {
	s := &Store{c: c, k: keys{prefix: "/reeve/"}, opTimeout: 5 * time.Second,
		maxBatch: defaultMaxBatch, maxCommitters: defaultMaxCommitters, cacheSize: 10000, maxQueued: 10000,
		commitWindow: defaultCommitWindow, maxTxnOps: DefaultMaxTxnOps}
	for _, o := range opts {
		o(s)
	}
	s.commits = newCommitter(s, s.maxBatch, s.maxCommitters, s.maxQueued)
	s.commits.window.length = s.commitWindow
	s.schedCommits = newScheduleCommitter(s)
	s.cache = newRecordCache(s.cacheSize)
	s.workflows = newWorkflowCache()
	s.metrics = newStoreMetrics(s.meters)
	s.unknown = newUnknownReporter(storeMeter(s.meters))
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// WriteStats counts the task writes of a store since it was created.
type WriteStats struct {
	// Txns is the etcd transactions that carried task writes.
	Txns int64
	// TaskWrites is the task creations and updates among them (each one
	// guarded by its own compare), including those that lost a race.
	TaskWrites int64
	// Queued is the writes waiting for a commit now.
	Queued int
}

// WriteStats returns the store's write counters.
func (s *Store) WriteStats() WriteStats {
	s.commits.mu.Lock()
	queued := len(s.commits.updates) + len(s.commits.creates)
	s.commits.mu.Unlock()
	return WriteStats{Txns: s.txns.Load(), TaskWrites: s.taskWrites.Load(), Queued: queued}
}

// Client returns the etcd client, for the election and leases of callers.
func (s *Store) Client() *clientv3.Client { return s.c }

// FenceCmp is the compare that fences a supervisor's write: its election
// key still exists with the create revision it won at (concurrency.Election
// Key() and Rev()). It goes in the transaction of the change it guards.
func FenceCmp(electionKey string, revision int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(electionKey), "=", revision)
}

// ElectionPrefix is the key prefix supervisors campaign on.
func (s *Store) ElectionPrefix() string { return s.k.election() }

// SchedulerKey is the key a scheduler instance keeps under its lease.
func (s *Store) SchedulerKey(id string) string { return s.k.scheduler(id) }

// opCtx bounds one etcd request by the store's timeout.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

// etcdErr translates an etcd client error; the caller's own cancellation
// stays a context error.
func etcdErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return fmt.Errorf("%s: %w", op, ErrNoSpace)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		return fmt.Errorf("%s: %w", op, ErrTooLarge)
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		return fmt.Errorf("%s: %w (%v)", op, ErrTooManyOps, err)
	}
	// Timeouts, lost leaders, closed connections: etcd cannot serve now.
	return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
}

// DialOptions are gRPC options for the etcd clients of Reeve's processes
// (clientv3.Config.DialOptions): reconnection attempts back off from 100ms
// to at most 2s, instead of gRPC's default of up to 120s, so that a process
// uses etcd again within about 2s of its return however long the outage
// lasted.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 5 * time.Second,
	})}
}

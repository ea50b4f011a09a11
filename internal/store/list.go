package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Defaults of TaskQuery's budgets.
const (
	// DefaultListBytes is the default byte budget of one page: well below
	// gRPC's default 4 MiB receive limit, so any client can read a page.
	DefaultListBytes = 2 << 20
	// DefaultListScan is the default number of index keys one page examines
	// when a task-id prefix filter skips some of them.
	DefaultListScan = 10_000
	// listFetchBatch is the most records one etcd transaction of a page
	// reads: with listFetchFirst and listFetchBytes it bounds the memory
	// of a page in flight beyond its budget.
	listFetchBatch = 16
	// listFetchFirst is how many records the first etcd transaction of a
	// page reads, before the page knows how large its records are.
	listFetchFirst = 4
	// listFetchBytes is about the most record bytes one etcd transaction of
	// a page reads once the page has seen how large its records are: each
	// further transaction reads listFetchBytes / (the largest record so
	// far) records (at least 1, at most listFetchBatch).
	listFetchBytes = 256 << 10
)

// TaskQuery selects a page of a namespace's tasks, newest first (create
// time descending, ties by task id ascending). Workflow and State choose one
// of the created indexes (see keys.go), the time bounds its range, and
// IDPrefix filters the keys read; no filter reads records it does not return.
type TaskQuery struct {
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
	// Labels, when set, keeps tasks that have every one of them. The page
	// then reads the label index of one of them and filters by State,
	// Workflow and the other labels as it reads records, within MaxScan
	// keys: a page may come back short, or empty with a next position.
	Labels map[string]string
	// After continues a previous page: the position it returned.
	After *ListPosition
	// Limit is the most tasks a page holds (at least 1).
	Limit int
	// MaxBytes is the most encoded bytes of tasks (after Trim) a page holds,
	// except that a page always holds its first task however large;
	// DefaultListBytes when 0.
	MaxBytes int
	// MaxScan is the most index keys a page examines; DefaultListScan when 0.
	// It only matters with IDPrefix.
	MaxScan int
	// Basic, when set, decodes records in the basic view: without inputs,
	// histories and step outputs, and of the workflow snapshot only its
	// namespace, name and version. What it leaves out is skipped on the
	// wire, never decoded (basic.go).
	Basic bool
	// Trim, when set, is applied to every task before it is counted against
	// MaxBytes and returned (e.g. to drop inputs and outputs).
	Trim func(*reevev1.Task)
	// Unindexed, when set, also lists the tasks that ended without created
	// keys (WithEndedUnindexed; unindexed.go) from the ended index, in the
	// same snapshot. A reader with an archive sets it.
	Unindexed bool
	// MaxEndedScan is the most ended keys a page with Unindexed examines;
	// DefaultListEndedScan when 0. Past it the page fails with
	// ErrEndedBacklog.
	MaxEndedScan int
}

// ListPosition is where a page ended: the create time and id of its last
// task (or of the last index key it examined).
type ListPosition struct {
	Created time.Time
	ID      string
}

// TaskPage is one page of a TaskQuery.
type TaskPage struct {
	Tasks []*reevev1.Task
	// Next is where the next page starts; nil when no task remains.
	Next *ListPosition
	// Revision is the etcd revision the page was read at.
	Revision int64
}

// QueryTasks returns one page of q from the created indexes and, with
// q.Unindexed, the ended index (unindexed.go). The page is one consistent
// snapshot: the indexes and the records are read at one revision. Its
// memory beyond the page itself is one etcd transaction of records:
// listFetchFirst records at first, then about listFetchBytes (one record
// when records are larger, listFetchBatch when they are small); with
// q.Unindexed, also the q.Limit first matching ended keys.
func (s *Store) QueryTasks(ctx context.Context, q TaskQuery) (TaskPage, error) {
	page, err := s.queryCreated(ctx, q)
	// The label index holds the tasks that ended unindexed too.
	if err != nil || !q.Unindexed || !unindexedState(q.State) || len(q.Labels) > 0 {
		return page, err
	}
	return s.withUnindexed(ctx, q, page)
}

// queryCreated returns one page of q from the created indexes.
func (s *Store) queryCreated(ctx context.Context, q TaskQuery) (TaskPage, error) {
	if q.Limit < 1 {
		return TaskPage{}, errors.New("store: query tasks: limit must be positive")
	}
	maxBytes, maxScan := q.MaxBytes, q.MaxScan
	if maxBytes <= 0 {
		maxBytes = DefaultListBytes
	}
	if maxScan <= 0 {
		maxScan = DefaultListScan
	}
	state := ""
	if q.State != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
		state = q.State.String()
	}
	// Without a state, the page merges the created index of every state
	// (keys.go): all of them share the key suffix <age>/<task-id>, so the
	// scan works on suffixes, reads the same stretch of each index at one
	// revision, and merges them in key order.
	prefixes := s.k.createdPrefixes(q.Namespace, q.Workflow, state)
	// With labels: the index of the first label (its keys have the same
	// <age>/<task-id> suffix), the rest of the filter applied to records.
	var match func(*reevev1.Task) bool
	if len(q.Labels) > 0 {
		first := slices.Min(slices.Collect(maps.Keys(q.Labels)))
		prefixes = []string{s.k.labelOf(q.Namespace, first, q.Labels[first])}
		match = func(t *reevev1.Task) bool {
			return (q.State == reevev1.TaskState_TASK_STATE_UNSPECIFIED || t.GetState() == q.State) &&
				(q.Workflow == "" || t.GetWorkflow().GetName() == q.Workflow) && hasLabels(t, q.Labels)
		}
	}
	// Newest first: the range starts at created_before and ends after
	// created_after (ages grow into the past). "" as the end is the end of
	// the index.
	from, to := "", ""
	if !q.CreatedBefore.IsZero() {
		from = age(q.CreatedBefore.Add(-time.Nanosecond))
	}
	if !q.CreatedAfter.IsZero() {
		to = age(q.CreatedAfter) + "0" // past every id of that age ("/" < "0")
	}
	if q.After != nil {
		if f := age(q.After.Created) + "/" + q.After.ID + "\x00"; f > from {
			from = f
		}
	}
	// etcd counts every key of a range even with a limit, so a page never
	// asks for the whole index: it reads windows of create time from its
	// start, 1s wide and 32 times wider each time one runs out of keys (at
	// most 9 windows cover 30 years), then the rest of the range. The first
	// window of an unbounded list covers what was created after now + 1h.
	width := time.Second
	winAge := ageOf(time.Now().Add(time.Hour))
	a0 := int64(-1)
	if !q.CreatedBefore.IsZero() {
		a0 = ageOf(q.CreatedBefore.Add(-time.Nanosecond))
	}
	if q.After != nil {
		a0 = max(a0, ageOf(q.After.Created))
	}
	if a0 >= 0 {
		winAge = addAge(a0, width)
	}
	var (
		page     TaskPage
		ids      []ListPosition // matching keys not yet fetched
		consumed ListPosition   // the last key fetched (returned or skipped)
		last     ListPosition   // the last key examined
		scanned  int
		rev      int64
		bytes    int
		batch    = listFetchFirst // records the next fetch reads at most
		largest  int              // the largest record read
	)
	// fetch reads the records of ids at rev into the page until the byte
	// budget is spent; full reports that (page.Next is then set). A page
	// full by count goes on scanning for one more match, to know whether
	// to return a next page token.
	fetch := func() (full bool, err error) {
		for len(ids) > 0 {
			n := min(len(ids), batch, q.Limit-len(page.Tasks))
			gets := make([]clientv3.Op, n)
			for i, p := range ids[:n] {
				gets[i] = clientv3.OpGet(s.k.task(q.Namespace, p.ID), clientv3.WithRev(rev))
			}
			octx, cancel := s.opCtx(ctx)
			resp, err := s.c.Txn(octx).Then(gets...).Commit()
			cancel()
			if err != nil {
				return false, etcdErr(ctx, "list tasks", err)
			}
			for i, r := range resp.Responses {
				kvs := r.GetResponseRange().GetKvs()
				if len(kvs) == 0 {
					// An index key without its record (an older retention
					// sweeper left it): skip it.
					consumed = ids[i]
					continue
				}
				largest = max(largest, len(kvs[0].Value))
				t, err := listTask(kvs[0], q.Basic)
				if err != nil {
					return false, err
				}
				if match != nil && !match(t) {
					consumed = ids[i]
					continue
				}
				if q.Trim != nil {
					q.Trim(t)
				}
				size := proto.Size(t)
				if len(page.Tasks) > 0 && bytes+size > maxBytes {
					page.Next = prevOf(page.Tasks[len(page.Tasks)-1])
					return true, nil
				}
				bytes += size
				page.Tasks = append(page.Tasks, t)
				consumed = ids[i]
				if match != nil && len(page.Tasks) == q.Limit {
					// Full: the next page starts after this task (the
					// candidates not read yet are read again then).
					page.Next = prevOf(t)
					return true, nil
				}
			}
			ids = ids[n:]
			batch = min(listFetchBatch, max(1, listFetchBytes/max(largest, 1)))
		}
		return false, nil
	}

	for scanned < maxScan {
		// With a prefix, the rest of the scan budget in one read: etcd
		// counts the window's keys once per read, so fewer reads cost less.
		chunk := maxScan - scanned
		if q.IDPrefix == "" && match == nil {
			chunk = q.Limit - len(page.Tasks) + 1
		}
		winTo := to
		if w := fmt.Sprintf("%020d", winAge); winAge < math.MaxInt64 && (to == "" || w < to) {
			winTo = w
		}
		keys, more, err := s.readCreated(ctx, prefixes, from, winTo, chunk, &rev)
		if err != nil {
			return TaskPage{}, err
		}
		page.Revision = rev
		for _, key := range keys {
			p, err := parseCreated(key)
			if err != nil {
				return TaskPage{}, fmt.Errorf("store: created index key %q: %w", key, err)
			}
			scanned++
			last = p
			if strings.HasPrefix(p.ID, q.IDPrefix) {
				ids = append(ids, p)
			}
			if match == nil && len(page.Tasks)+len(ids) > q.Limit {
				// One more match than the page holds: the page is full
				// unless the byte budget cuts it first, and tasks remain.
				ids = ids[:len(ids)-1]
				if _, err := fetch(); err != nil {
					return TaskPage{}, err
				}
				page.Next = &consumed
				return page, nil
			}
		}
		full, err := fetch()
		if err != nil {
			return TaskPage{}, err
		}
		if full {
			return page, nil // cut by the byte budget, page.Next set
		}
		if !more {
			if winTo == to {
				return page, nil // the range is exhausted
			}
			from, winAge = winTo, addAge(winAge, width) // the next, wider window
			width = min(width*32, 100*365*24*time.Hour)
			continue
		}
		from = keys[len(keys)-1] + "\x00"
	}
	// The scan budget is spent: continue after the last key examined.
	page.Next = &last
	return page, nil
}

// listTask decodes the task of a record a list or watch read, in the basic view
// when basic is set.
func listTask(kv *mvccpb.KeyValue, basic bool) (*reevev1.Task, error) {
	if !basic {
		v, err := unmarshalTask(kv)
		if err != nil {
			return nil, err
		}
		return v.Record.GetTask(), nil
	}
	t, err := decodeBasic(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
	}
	return t, nil
}

// readCreated reads the created-index keys with suffixes in [from, to) ("" as
// to: the end of the index) under every prefix, keys only, at *rev (the
// current revision when 0, then stored in *rev), and returns the first limit
// suffixes in key order; more reports that the window may hold keys after
// them. Each prefix is read up to limit keys, which is enough: a prefix with
// more keys returned limit keys before its first one not read, so the merge
// has limit keys before it too.
func (s *Store) readCreated(ctx context.Context, prefixes []string, from, to string, limit int, rev *int64) (keys []string, more bool, err error) {
	gets := make([]clientv3.Op, len(prefixes))
	for i, p := range prefixes {
		end := prefixEnd(p)
		if to != "" {
			end = p + to
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit))}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		gets[i] = clientv3.OpGet(p+from, opts...)
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	var ranges []*etcdserverpb.RangeResponse
	if len(gets) == 1 {
		// A plain read: a transaction costs etcd more.
		resp, err := s.c.Do(octx, gets[0])
		if err != nil {
			return nil, false, etcdErr(ctx, "list tasks", err)
		}
		ranges = []*etcdserverpb.RangeResponse{(*etcdserverpb.RangeResponse)(resp.Get())}
		if *rev == 0 {
			*rev = resp.Get().Header.Revision
		}
	} else {
		resp, err := s.c.Txn(octx).Then(gets...).Commit()
		if err != nil {
			return nil, false, etcdErr(ctx, "list tasks", err)
		}
		for _, r := range resp.Responses {
			ranges = append(ranges, r.GetResponseRange())
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
		}
	}
	for i, r := range ranges {
		for _, kv := range r.GetKvs() {
			keys = append(keys, strings.TrimPrefix(string(kv.Key), prefixes[i]))
		}
		more = more || r.GetMore()
	}
	if len(prefixes) > 1 {
		slices.Sort(keys)
	}
	if len(keys) > limit {
		keys, more = keys[:limit], true
	}
	return keys, more, nil
}

// prevOf is the position of a returned task.
func prevOf(t *reevev1.Task) *ListPosition {
	return &ListPosition{Created: t.GetCreateTime().AsTime(), ID: t.GetId()}
}

// parseCreated parses "<age>/<task-id>".
func parseCreated(rest string) (ListPosition, error) {
	a, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" {
		return ListPosition{}, errors.New("not <age>/<task-id>")
	}
	created, err := parseAge(a)
	if err != nil {
		return ListPosition{}, err
	}
	return ListPosition{Created: created, ID: id}, nil
}

// CountTasksByState counts a namespace's tasks per state (of one workflow
// when wf is not empty) in one transaction of count-only ranges over the
// state indexes: etcd walks the index keys and returns no values. Every
// state is in the map, 0 when it has no tasks.
func (s *Store) CountTasksByState(ctx context.Context, ns, wf string) (counts map[reevev1.TaskState]int64, revision int64, err error) {
	var ops []clientv3.Op
	for _, st := range taskStates {
		prefix := s.k.createdOf(ns, wf, st.String())
		ops = append(ops, clientv3.OpGet(prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithCountOnly()))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, etcdErr(ctx, "count tasks", err)
	}
	counts = make(map[reevev1.TaskState]int64, len(taskStates))
	for i, r := range resp.Responses {
		counts[taskStates[i]] = r.GetResponseRange().GetCount()
	}
	return counts, resp.Header.Revision, nil
}

// TaskEvent is one event of WatchTasks: a task record written or deleted
// (Task set), or a reset (Task nil): changes after the requested revision
// were compacted away, and the events that follow start after Revision.
type TaskEvent struct {
	// Task is the record after the change; for a deletion only its
	// namespace and id are set. Nil for a reset.
	Task     *reevev1.Task
	Deleted  bool
	Revision int64
}

// WatchTasks calls fn for every change of a task record of namespace ns
// after revision after (from now when 0), in revision order, until ctx ends
// or fn returns an error (returned as is). When the revisions to resume
// from are compacted, fn gets one reset event and the changes after its
// revision follow. A watch that etcd ends otherwise (leader loss, a
// reconnect) resumes where it was without an event. With basic set, records
// are decoded in the basic view (TaskQuery.Basic).
func (s *Store) WatchTasks(ctx context.Context, ns string, after int64, basic bool, fn func(TaskEvent) error) error {
	prefix := s.k.tasksOf(ns)
	current := func() (int64, error) {
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		resp, err := s.c.Get(octx, s.k.createdMeta(), clientv3.WithCountOnly())
		if err != nil {
			return 0, etcdErr(ctx, "watch tasks", err)
		}
		return resp.Header.Revision, nil
	}
	if after <= 0 {
		rev, err := current()
		if err != nil {
			return err
		}
		after = rev
	}
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(after+1))
		compacted, err := func() (bool, error) {
			for wr := range wch {
				if wr.CompactRevision != 0 {
					return true, nil
				}
				if wr.Err() != nil {
					return false, nil
				}
				for _, ev := range wr.Events {
					te := TaskEvent{Revision: ev.Kv.ModRevision}
					if ev.Type == mvccpb.DELETE {
						te.Deleted = true
						te.Task = &reevev1.Task{Namespace: ns, Id: strings.TrimPrefix(string(ev.Kv.Key), prefix)}
					} else {
						t, err := listTask(ev.Kv, basic)
						if err != nil {
							return false, err
						}
						te.Task = t
					}
					if err := fn(te); err != nil {
						return false, err
					}
					after = te.Revision
				}
			}
			return false, nil
		}()
		cancel()
		if err != nil {
			return err
		}
		if !compacted {
			// Ended by etcd (no leader, a reconnect): resume after a pause.
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		{
			rev, err := current()
			if err != nil {
				return err
			}
			if err := fn(TaskEvent{Revision: rev}); err != nil {
				return err
			}
			after = rev
		}
	}
	return ctx.Err()
}

// ageOf is the numeric age of a create time (see the key layout), clamped
// to [0, MaxInt64].
func ageOf(t time.Time) int64 {
	n := t.UnixNano()
	if n < 0 {
		return math.MaxInt64
	}
	return math.MaxInt64 - n
}

// addAge adds d to an age without overflowing.
func addAge(a int64, d time.Duration) int64 {
	if a > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return a + int64(d)
}

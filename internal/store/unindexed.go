package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Ended tasks with an archive. A scheduler that keeps finished tasks in an
// archive lists and counts them there; in etcd, a task that ends with
// nothing an operator could act on (SUCCEEDED, COMPENSATED, or CANCELED with
// nothing left to undo: taskstate.LeftToUndo) keeps only its record and its
// ended key until it moves. The write that ends it sets the record's
// ended_unindexed, and the record's index keys (appendIndexKeys) follow:
// its created-state and created-wf-state keys are deleted, not moved to the
// terminal state, and its ended key's value says, after the state name, its
// create time and workflow:
//
//	ended/<end-time>/<ns>/<task-id>   <TASK_STATE_X>/<age>/<workflow>
//
// That is two operations fewer at the end (the two puts) and two at the
// move (the two deletes). Lists and counts that ask for them (TaskQuery.
// Unindexed, CountEndedUnindexed; taskread does when it has an archive)
// read the ended index for such tasks of the grace window. FAILED tasks,
// and CANCELED ones with work left to undo, keep their created keys.
//
// The field, not the store's option, decides the keys, so a task is swept
// or moved with exactly the keys it has whichever way its sweeper runs.

// WithEndedUnindexed makes the write that ends a task with nothing left to
// act on drop its created keys (see above). Set it only with an archive,
// whose lists and counts cover finished tasks, and read through a reader
// that lists the ended index (TaskQuery.Unindexed): without one, such a
// task is found by its id but not listed until it moves. Default off.
func WithEndedUnindexed(on bool) Option { return func(s *Store) { s.endedUnindexed = on } }

// Defaults of the ended-index scans.
const (
	// DefaultListEndedScan is the default number of ended keys one page or
	// count examines for tasks that ended unindexed (TaskQuery.MaxEndedScan).
	DefaultListEndedScan = 200_000
	// endedScanChunk is how many ended keys one read of such a scan returns.
	endedScanChunk = 4096
	// endedSkew is how much earlier than a task's create time its end time
	// may be, for the clocks of the schedulers that created and ended it
	// (NTP keeps them milliseconds apart): a page reads that much more of
	// the ended index. Each second of it is a second of tasks that ended.
	endedSkew = 2 * time.Second
)

// ErrEndedBacklog means a list or count of tasks that ended unindexed would
// examine more ended keys than its budget: the archive is behind (or etcd
// holds many FAILED tasks and the list asks for every state). taskread
// reports it as the archive's error.
var ErrEndedBacklog = errors.New("store: too many ended tasks in etcd")

// unindexable reports whether a terminal task ends without created keys
// under WithEndedUnindexed.
func unindexable(t *reevev1.Task) bool {
	switch t.GetState() {
	case reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_COMPENSATED:
		return true
	case reevev1.TaskState_TASK_STATE_CANCELED:
		return !taskstate.LeftToUndo(t)
	}
	return false
}

// unindexedState reports whether a list of state st (UNSPECIFIED: any) may
// hold tasks that ended unindexed.
func unindexedState(st reevev1.TaskState) bool {
	return st == reevev1.TaskState_TASK_STATE_UNSPECIFIED || (taskstate.TerminalTask(st) && st != reevev1.TaskState_TASK_STATE_FAILED)
}

// markUnindexed sets after's ended_unindexed when the write ends the task
// with nothing left to act on and the store runs WithEndedUnindexed, and
// clears it from a task that is not terminal (none is revived today; a
// Reeve that revives one must not inherit the mark).
func (s *Store) markUnindexed(before, after *storev1.TaskRecord) {
	t := after.GetTask()
	switch {
	case !taskstate.TerminalTask(t.GetState()):
		after.EndedUnindexed = false
	case s.endedUnindexed && !taskstate.TerminalTask(before.GetTask().GetState()) && unindexable(t):
		after.EndedUnindexed = true
	}
}

// endedState returns the state an ended key's value names, in either form
// ("<STATE>" or "<STATE>/<age>/<workflow>").
func endedState(val string) reevev1.TaskState {
	st, _, _ := strings.Cut(val, "/")
	return reevev1.TaskState(reevev1.TaskState_value[st])
}

// unindexedEntry is an ended key of a task that ended unindexed.
type unindexedEntry struct {
	ns, id, workflow string
	state            reevev1.TaskState
	suffix           string // <age>/<task-id>: its place in a list, as a created key's suffix
}

// parseUnindexed parses an ended key and its value; ok is false for a key of
// a task with created keys (the value is a state name alone) or a malformed
// one.
func (k keys) parseUnindexed(key, val string) (e unindexedEntry, ok bool) {
	st, rest, ok := strings.Cut(val, "/")
	if !ok {
		return e, false
	}
	a, wf, ok := strings.Cut(rest, "/")
	if !ok || len(a) != 20 {
		return e, false
	}
	parts := strings.Split(strings.TrimPrefix(key, k.endedPrefix()), "/")
	if len(parts) != 3 {
		return e, false
	}
	return unindexedEntry{ns: parts[1], id: parts[2], workflow: wf,
		state: reevev1.TaskState(reevev1.TaskState_value[st]), suffix: a + "/" + parts[2]}, true
}

// scanEnded calls fn for every ended key with an end time in [from, to)
// (zero from: the start of the index; zero to: its end) at revision rev,
// reading endedScanChunk keys at a time, and returns how many it read; it
// returns ErrEndedBacklog past maxScan keys.
func (s *Store) scanEnded(ctx context.Context, from, to time.Time, rev int64, maxScan int, fn func(key, val string)) (int, error) {
	start, end := s.k.endedPrefix(), prefixEnd(s.k.endedPrefix())
	if !from.IsZero() {
		start = string(appendTime([]byte(start), from.UnixNano()))
	}
	if !to.IsZero() {
		end = string(appendTime([]byte(s.k.endedPrefix()), to.UnixNano()))
	}
	scanned := 0
	for {
		limit := max(1, min(endedScanChunk, maxScan+1-scanned))
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(octx, start, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(int64(limit)))
		cancel()
		if err != nil {
			return scanned, etcdErr(ctx, "scan ended tasks", err)
		}
		if scanned += len(resp.Kvs); scanned > maxScan {
			return scanned, ErrEndedBacklog
		}
		for _, kv := range resp.Kvs {
			fn(string(kv.Key), string(kv.Value))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return scanned, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// CountEndedUnindexed counts, at etcd revision rev, namespace ns's tasks (of
// workflow wf when not empty) that ended unindexed, by state: what
// CountTasksByState at rev does not see. It reads the whole ended index
// (tasks of every namespace that wait to move, and FAILED ones of the
// retention), up to DefaultListEndedScan keys, else ErrEndedBacklog.
func (s *Store) CountEndedUnindexed(ctx context.Context, ns, wf string, rev int64) (map[reevev1.TaskState]int64, error) {
	counts := map[reevev1.TaskState]int64{}
	_, err := s.scanEnded(ctx, time.Time{}, time.Time{}, rev, DefaultListEndedScan, func(key, val string) {
		if e, ok := s.k.parseUnindexed(key, val); ok && e.ns == ns && (wf == "" || e.workflow == wf) {
			counts[e.state]++
		}
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", backlogErr(err, DefaultListEndedScan))
	}
	return counts, nil
}

// backlogErr says what an ErrEndedBacklog of a scan of budget keys means.
func backlogErr(err error, budget int) error {
	if !errors.Is(err, ErrEndedBacklog) {
		return err
	}
	return fmt.Errorf("%w: more than %d ended tasks wait in etcd to move to the archive, or are FAILED; list a state other than SUCCEEDED, COMPENSATED or CANCELED, or narrow by created_after",
		err, budget)
}

// withUnindexed merges into page, QueryTasks' page of q from the created
// indexes, the tasks of q's stretch that ended unindexed, read from the
// ended index at the page's revision: one snapshot, in which a task has
// either created keys or an unindexed ended key, never both.
//
// Only the stretch up to where page stopped (page.Next) is merged: the
// tasks listed there were created at or after page.Next's create time, so
// ended at or after it (less endedSkew, for the schedulers' clocks). The
// ended index is read backwards in windows of end time, from now: the
// last second, then each window 16 times wider, down to that bound. A
// window's tasks that were created after its start (less endedSkew) are
// all known once it is read, so the reading stops as soon as those and the
// page's own tasks of that stretch fill the page: the first page of a busy
// namespace reads the last seconds of the index. A list of the unindexed
// states alone, or a page far back in the list, reads more of it (the
// grace window's tasks, and FAILED ones of the retention), up to
// q.MaxEndedScan keys. Of the matches, the q.Limit first in list order are
// kept, so a page's memory stays bounded.
func (s *Store) withUnindexed(ctx context.Context, q TaskQuery, page TaskPage) (TaskPage, error) {
	maxScan := q.MaxEndedScan
	if maxScan <= 0 {
		maxScan = DefaultListEndedScan
	}
	// The stretch of the list, as created keys' suffixes: [from, to], cut
	// at page.Next.
	from, to, cut := "", "", ""
	if !q.CreatedBefore.IsZero() {
		from = age(q.CreatedBefore.Add(-time.Nanosecond))
	}
	if q.After != nil {
		if f := age(q.After.Created) + "/" + q.After.ID + "\x00"; f > from {
			from = f
		}
	}
	if !q.CreatedAfter.IsZero() {
		to = age(q.CreatedAfter) + "0"
	}
	low := q.CreatedAfter
	if page.Next != nil {
		cut = age(page.Next.Created) + "/" + page.Next.ID
		low = page.Next.Created
	}
	if !low.IsZero() {
		low = low.Add(-endedSkew)
	}
	state := ""
	if q.State != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
		state = q.State.String()
	}
	var (
		cands []unindexedEntry
		// horizon, when set, is the last place of the list (a suffix)
		// up to which the ended index was read whole: matches after it
		// were not kept, or not read.
		horizon string
	)
	keep := func() {
		slices.SortFunc(cands, func(a, b unindexedEntry) int { return strings.Compare(a.suffix, b.suffix) })
		if len(cands) > q.Limit {
			cands = cands[:q.Limit]
			if h := cands[q.Limit-1].suffix; horizon == "" || h < horizon {
				horizon = h
			}
		}
	}
	match := func(key, val string) {
		e, ok := s.k.parseUnindexed(key, val)
		if !ok || e.ns != q.Namespace || (state != "" && e.state.String() != state) || (q.Workflow != "" && e.workflow != q.Workflow) ||
			!strings.HasPrefix(e.id, q.IDPrefix) || e.suffix < from || (to != "" && e.suffix >= to) || (cut != "" && e.suffix > cut) {
			return
		}
		cands = append(cands, e)
		if len(cands) >= 2*q.Limit+endedScanChunk {
			keep()
		}
	}
	now := time.Now()
	var upper time.Time // the end of the next window; zero: the end of the index
	for width, scanned := time.Second, 0; ; width *= 16 {
		lo, last := now.Add(-width), false
		if !lo.After(low) || width > 100*365*24*time.Hour {
			lo, last = low, true
		}
		n, err := s.scanEnded(ctx, lo, upper, page.Revision, maxScan-scanned, match)
		if err != nil {
			return TaskPage{}, fmt.Errorf("list tasks: %w", backlogErr(err, maxScan))
		}
		if scanned += n; last {
			break
		}
		// Enough when the stretch known whole (created at or after
		// lo + endedSkew: suffixes before bound) fills the page.
		bound, known := age(lo.Add(endedSkew))+"0", 0
		for _, t := range page.Tasks {
			if suffixOf(t) < bound {
				known++
			}
		}
		for _, e := range cands {
			if e.suffix < bound {
				known++
			}
		}
		if known >= q.Limit {
			// The page's q.Limit first places are known: the rest waits
			// for the next page.
			keep()
			var places []string
			for _, t := range page.Tasks {
				places = append(places, suffixOf(t))
			}
			for _, e := range cands {
				places = append(places, e.suffix)
			}
			slices.Sort(places)
			if h := places[q.Limit-1]; horizon == "" || h < horizon {
				horizon = h
			}
			break
		}
		upper = lo
	}
	keep()
	if len(cands) == 0 && horizon == "" {
		return page, nil
	}
	maxBytes := q.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultListBytes
	}
	// Read the candidates' records at the page's revision, a batch at a
	// time as the merge reaches them.
	var fetched []*reevev1.Task // of cands[next-len(fetched):next]
	next := 0
	candidate := func(j int) (*reevev1.Task, error) {
		if j >= next {
			n := min(len(cands)-next, listFetchBatch)
			gets := make([]clientv3.Op, n)
			for i, e := range cands[next : next+n] {
				gets[i] = clientv3.OpGet(s.k.task(e.ns, e.id), clientv3.WithRev(page.Revision))
			}
			octx, cancel := s.opCtx(ctx)
			resp, err := s.c.Txn(octx).Then(gets...).Commit()
			cancel()
			if err != nil {
				return nil, etcdErr(ctx, "list tasks", err)
			}
			fetched = fetched[:0]
			for _, r := range resp.Responses {
				kvs := r.GetResponseRange().GetKvs()
				if len(kvs) == 0 {
					fetched = append(fetched, nil) // an ended key without its record: skipped
					continue
				}
				t, err := listTask(kvs[0], q.Basic)
				if err != nil {
					return nil, err
				}
				if q.Trim != nil {
					q.Trim(t)
				}
				fetched = append(fetched, t)
			}
			next += n
		}
		return fetched[j-(next-len(fetched))], nil
	}
	out := TaskPage{Revision: page.Revision}
	live := page.Tasks
	if horizon != "" {
		// Cands are before it; tasks of the page after it wait for the
		// next page, as the matches after it do.
		cands = slices.DeleteFunc(cands, func(e unindexedEntry) bool { return e.suffix > horizon })
		for len(live) > 0 && suffixOf(live[len(live)-1]) > horizon {
			live = live[:len(live)-1]
		}
	}
	size, i, j := 0, 0, 0
	for len(out.Tasks) < q.Limit && (i < len(live) || j < len(cands)) {
		var t *reevev1.Task
		if j == len(cands) || (i < len(live) && suffixOf(live[i]) < cands[j].suffix) {
			t = live[i]
			i++
		} else {
			var err error
			if t, err = candidate(j); err != nil {
				return TaskPage{}, err
			}
			j++
			if t == nil {
				continue
			}
		}
		n := proto.Size(t)
		if len(out.Tasks) > 0 && size+n > maxBytes {
			out.Next = prevOf(out.Tasks[len(out.Tasks)-1])
			return out, nil
		}
		size += n
		out.Tasks = append(out.Tasks, t)
	}
	switch {
	case i < len(live) || j < len(cands):
		out.Next = prevOf(out.Tasks[len(out.Tasks)-1]) // full by count
	case horizon != "":
		// Every match up to the horizon is listed (or had no record):
		// the next page starts after it.
		p, err := parseCreated(horizon)
		if err != nil {
			return TaskPage{}, fmt.Errorf("store: list position %q: %w", horizon, err)
		}
		out.Next = &p
	default:
		out.Next = page.Next
	}
	return out, nil
}

// suffixOf is a task's place in a list: the suffix of its created keys.
func suffixOf(t *reevev1.Task) string {
	return age(t.GetCreateTime().AsTime()) + "/" + t.GetId()
}

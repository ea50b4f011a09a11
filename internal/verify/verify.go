// Package verify checks the invariants of Reeve's etcd data on a live store:
// every index key agrees with the record it derives from, terminal tasks
// hold no live keys, and every non-terminal task has something that will
// move it. It reads one snapshot (one etcd revision) in pages, so its
// memory is bounded by the page size, and it never writes.
package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Violation kinds.
const (
	// KindOrphan: an index key whose task record does not exist.
	KindOrphan = "orphan_index_key"
	// KindMismatch: an index key the record does not derive (a stale
	// ready entry, a deadline of another attempt, a wrong state), or one it
	// derives with another value.
	KindMismatch = "index_disagrees_with_record"
	// KindMissing: a key the record derives is absent.
	KindMissing = "missing_index_key"
	// KindTerminalLive: a terminal task with a queued or dispatched step
	// (ready or deadline keys).
	KindTerminalLive = "terminal_task_with_live_keys"
	// KindWedged: a non-terminal task nothing will move: no queued step
	// (which includes a retry waiting for its backoff), no dispatched step
	// with a deadline.
	KindWedged = "task_nothing_will_move"
	// KindUndecodable: a record that does not decode.
	KindUndecodable = "undecodable_record"
	// KindNotArchived: with an archive, a task that ended long before (past
	// its grace, or the retention for a FAILED one, and Slack) is still in
	// etcd: the move to the archive is not happening.
	KindNotArchived = "ended_task_not_archived"
	// KindLost: a task named in Options.Expect is neither in etcd nor in
	// the archive.
	KindLost = "task_lost"
	// KindUnknownVersion: a record (task, ready entry, workflow, alert,
	// agent) of a version newer than this Reeve knows, written by a newer
	// one: this Reeve's schedulers leave it as it is, and this check does
	// not judge it (nor the index keys of such a task).
	KindUnknownVersion = "record_of_unknown_version"
)

// Violation is one broken invariant.
type Violation struct {
	Kind      string `json:"kind"`
	Key       string `json:"key,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	Detail    string `json:"detail"`
}

// Report is the outcome of a check.
type Report struct {
	// Revision is the etcd revision the whole check read.
	Revision   int64       `json:"revision"`
	Tasks      int         `json:"tasks"`
	IndexKeys  int         `json:"index_keys"`
	Violations []Violation `json:"violations"`
	// Truncated: more violations were found than MaxViolations; only the
	// first are listed.
	Truncated bool `json:"truncated,omitempty"`
}

// OK reports whether no violation was found.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes one line per violation and a summary.
func (r *Report) WriteText(w io.Writer) error {
	for _, v := range r.Violations {
		if _, err := fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\n", v.Kind, v.Namespace, v.TaskID, v.Key, v.Detail); err != nil {
			return err
		}
	}
	more := ""
	if r.Truncated {
		more = " (list truncated)"
	}
	_, err := fmt.Fprintf(w, "checked %d tasks and %d index keys at revision %d: %d violations%s\n", r.Tasks, r.IndexKeys, r.Revision, len(r.Violations), more)
	return err
}

// Options tune a check.
type Options struct {
	// Prefix is the store's key prefix; default "/reeve/".
	Prefix string
	// PageSize is how many keys one read returns; default 500.
	PageSize int
	// MaxViolations bounds the violations listed; default 10,000.
	MaxViolations int

	// Tasks reads tasks from etcd and the schedulers' archive of finished
	// tasks (their --archive-dsn); its store must be the one under Prefix.
	// When it has an archive (taskread.Reader.HasArchive), ended tasks must
	// have moved there. Default: a reader of etcd alone.
	Tasks *taskread.Reader
	// ArchiveGrace and Retention are the schedulers' --archive-grace and
	// --retention (how long FAILED tasks stay); Slack is how much later
	// than that a move counts as not happening (default 10m). Now is the
	// clock (default time.Now).
	ArchiveGrace, Retention, Slack time.Duration
	Now                            func() time.Time
	// Expect names tasks that must exist, in etcd or in the archive
	// (e.g. every id a load generator's submissions were acknowledged):
	// namespace and id. They are looked up after the scan, at etcd's
	// latest revision and then in the archive (taskread.Reader.Lost).
	Expect []TaskRef
}

// TaskRef names a task.
type TaskRef struct{ Namespace, ID string }

// Check scans the store under opts.Prefix at one revision and reports every
// violation. It fails if etcd fails or the revision is compacted during the
// scan (run it again, or raise etcd's compaction retention), and refuses a
// key layout newer than this Reeve knows (an error matching
// store.ErrLayoutTooNew): it could not tell a violation from a change.
func Check(ctx context.Context, c *clientv3.Client, opts Options) (*Report, error) {
	if opts.Prefix == "" {
		opts.Prefix = "/reeve/"
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.MaxViolations <= 0 {
		opts.MaxViolations = 10000
	}
	if opts.Slack <= 0 {
		opts.Slack = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ck := &checker{c: c, st: store.New(c, store.WithPrefix(opts.Prefix), store.WithRecordCache(0)), opts: opts, rep: &Report{}}
	if ck.opts.Tasks == nil {
		ck.opts.Tasks = taskread.New(ck.st, nil)
	}
	layout, ok, err := ck.st.LayoutVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if ok && layout > store.LayoutVersion {
		return nil, fmt.Errorf("verify: %w", &store.LayoutError{Prefix: opts.Prefix, Found: layout})
	}
	resp, err := c.Get(ctx, opts.Prefix+"tasks/", clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	ck.rev = resp.Header.Revision
	ck.rep.Revision = ck.rev
	if err := ck.loadLimits(ctx); err != nil { // limits.go
		return nil, err
	}
	if err := ck.scanRecords(ctx); err != nil {
		return nil, err
	}
	ck.checkLimits()
	// The legacy indexes are those of older layouts (store/keys.go): a
	// store should have none left once a newer scheduler started (each key
	// is reported).
	for _, idx := range append([]string{"ready/", "deadlines/", "created-state/", "created-wf-state/", "beating/", "ended/", "labels/", "waiting/", "starting/",
		"slots/", "keyslots/", "taskslots/", "keywait/"}, legacyIndexes...) {
		if err := ck.scanIndex(ctx, idx); err != nil {
			return nil, err
		}
	}
	// The other records, for their versions only.
	for _, p := range []string{"workflows/", "alerts/", "agents/", "disconnected/"} {
		if err := ck.scanVersions(ctx, p); err != nil {
			return nil, err
		}
	}
	if err := ck.checkExpected(ctx); err != nil {
		return nil, err
	}
	if err := ck.checkSchedules(ctx); err != nil {
		return nil, err
	}
	return ck.rep, nil
}

type checker struct {
	c    *clientv3.Client
	st   *store.Store
	opts Options
	rev  int64
	rep  *Report
	lim  *limitCheck // limits.go
}

func (ck *checker) add(v Violation) {
	if len(ck.rep.Violations) >= ck.opts.MaxViolations {
		ck.rep.Truncated = true
		return
	}
	ck.rep.Violations = append(ck.rep.Violations, v)
}

// pages calls fn with each page of keys under prefix, at the check's
// revision.
func (ck *checker) pages(ctx context.Context, prefix string, keysOnly bool, fn func(kvs []*mvccKV) error) error {
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(ck.opts.PageSize)), clientv3.WithRev(ck.rev)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := ck.c.Get(ctx, from, opts...)
		if err != nil {
			return fmt.Errorf("verify: read %s: %w", prefix, err)
		}
		kvs := make([]*mvccKV, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			kvs[i] = &mvccKV{key: string(kv.Key), value: kv.Value}
		}
		if err := fn(kvs); err != nil {
			return err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

type mvccKV struct {
	key   string
	value []byte
}

func decode(kv *mvccKV) (*storev1.TaskRecord, error) {
	rec := &storev1.TaskRecord{}
	if err := store.UnmarshalRecord(kv.value, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// scanRecords checks every record: its derived keys exist with their
// values, and it is terminal without live keys or non-terminal with
// something that moves it.
func (ck *checker) scanRecords(ctx context.Context) error {
	return ck.pages(ctx, ck.opts.Prefix+"tasks/", false, func(kvs []*mvccKV) error {
		var want []string
		wantVal := map[string]string{}
		owner := map[string]*reevev1.Task{}
		for _, kv := range kvs {
			ck.rep.Tasks++
			rec, err := decode(kv)
			if err != nil {
				ck.add(Violation{Kind: KindUndecodable, Key: kv.key, Detail: err.Error()})
				continue
			}
			t := rec.GetTask()
			if v := rec.GetRecordVersion(); v > store.RecordVersion {
				ck.unknownVersion(kv.key, t.GetNamespace(), t.GetId(), "task record", v)
				continue
			}
			ck.checkMoves(t)
			ck.checkArchived(t)
			ck.lim.collect(t)
			for key, val := range ck.st.DerivedKeys(rec) {
				want = append(want, key)
				wantVal[key] = val
				owner[key] = t
			}
		}
		// Look the derived keys up at the same revision, 100 per read.
		for start := 0; start < len(want); start += 100 {
			part := want[start:min(start+100, len(want))]
			gets := make([]clientv3.Op, len(part))
			for i, key := range part {
				gets[i] = clientv3.OpGet(key, clientv3.WithRev(ck.rev))
			}
			resp, err := ck.c.Txn(ctx).Then(gets...).Commit()
			if err != nil {
				return fmt.Errorf("verify: read index keys: %w", err)
			}
			for i, key := range part {
				t := owner[key]
				got := resp.Responses[i].GetResponseRange().GetKvs()
				switch {
				case len(got) == 0:
					ck.add(Violation{Kind: KindMissing, Key: key, Namespace: t.GetNamespace(), TaskID: t.GetId(),
						Detail: fmt.Sprintf("the %s task's record implies this key; it is absent", t.GetState())})
				case string(got[0].Value) != wantVal[key] && !newerEntry(ck.opts.Prefix, key, got[0].Value):
					ck.add(Violation{Kind: KindMismatch, Key: key, Namespace: t.GetNamespace(), TaskID: t.GetId(),
						Detail: "the key's value differs from what the record implies"})
				}
			}
		}
		return nil
	})
}

// newerEntry reports whether key is a ready entry of an unknown version
// (the index scan reports it).
func newerEntry(prefix, key string, val []byte) bool {
	if !strings.HasPrefix(key, prefix+"ready/") {
		return false
	}
	v, err := store.VersionOf(val)
	return err == nil && v > store.RecordVersion
}

// checkMoves reports a terminal task with queued, dispatched or waiting
// steps, and a non-terminal one nothing will move.
func (ck *checker) checkMoves(t *reevev1.Task) {
	var live []string
	moves := false
	for _, s := range t.GetSteps() {
		_, hasDeadline := taskstate.Deadline(s)
		switch {
		case taskstate.Queued(s):
			live = append(live, s.GetName()+" (queued)")
			moves = true
		case taskstate.Dispatched(s):
			live = append(live, s.GetName()+" (dispatched)")
			moves = moves || hasDeadline
		case taskstate.Waiting(s):
			live = append(live, s.GetName()+" (waiting)")
			moves = moves || hasDeadline
		}
	}
	if _, ok := taskstate.AwaitingStart(t); ok {
		moves = true // its @start key moves it (taskstate/timers.go)
	}
	key := ck.opts.Prefix + "tasks/" + t.GetNamespace() + "/" + t.GetId()
	if taskstate.TerminalTask(t.GetState()) {
		if len(live) > 0 {
			ck.add(Violation{Kind: KindTerminalLive, Key: key, Namespace: t.GetNamespace(), TaskID: t.GetId(),
				Detail: fmt.Sprintf("%s task with live steps: %s", t.GetState(), strings.Join(live, ", "))})
		}
		return
	}
	if !moves {
		ck.add(Violation{Kind: KindWedged, Key: key, Namespace: t.GetNamespace(), TaskID: t.GetId(),
			Detail: fmt.Sprintf("%s task with no queued step, no dispatched or waiting step with a deadline, and no start time ahead", t.GetState())})
	}
}

// checkArchived reports an ended task still in etcd long after it should
// have moved to the archive.
func (ck *checker) checkArchived(t *reevev1.Task) {
	if !ck.opts.Tasks.HasArchive() || !taskstate.TerminalTask(t.GetState()) || t.GetEndTime() == nil {
		return
	}
	stay := ck.opts.ArchiveGrace
	if t.GetState() == reevev1.TaskState_TASK_STATE_FAILED {
		stay = ck.opts.Retention
	}
	ended := t.GetEndTime().AsTime()
	if late := ck.opts.Now().Sub(ended) - stay; late > ck.opts.Slack {
		ck.add(Violation{Kind: KindNotArchived, Key: ck.opts.Prefix + "tasks/" + t.GetNamespace() + "/" + t.GetId(), Namespace: t.GetNamespace(), TaskID: t.GetId(),
			Detail: fmt.Sprintf("%s task ended at %s and is still in etcd %s after it should have moved to the archive (is the archive down? see the schedulers' reeve.archive.errors)", t.GetState(), ended.Format(time.RFC3339), late.Round(time.Second))})
	}
}

// checkExpected reports every task of opts.Expect found neither in etcd
// nor, after that, in the archive: the reader's lost check, per namespace.
func (ck *checker) checkExpected(ctx context.Context) error {
	byNS := map[string][]string{}
	for _, r := range ck.opts.Expect {
		byNS[r.Namespace] = append(byNS[r.Namespace], r.ID)
	}
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		lost, err := ck.opts.Tasks.Lost(ctx, ns, byNS[ns])
		if err != nil {
			return fmt.Errorf("verify: read expected tasks: %w", err)
		}
		for _, id := range lost {
			ck.add(Violation{Kind: KindLost, Namespace: ns, TaskID: id, Detail: "expected, and neither in etcd nor in the archive"})
		}
	}
	return nil
}

// scanIndex checks every key of one index against its record.
func (ck *checker) scanIndex(ctx context.Context, idx string) error {
	prefix := ck.opts.Prefix + idx
	return ck.pages(ctx, prefix, false, func(kvs []*mvccKV) error {
		// The records of the page's keys, read once each at the revision.
		type ref struct{ ns, id string }
		refs := make([]ref, len(kvs))
		var need []string
		seen := map[string]bool{}
		for i, kv := range kvs {
			ck.rep.IndexKeys++
			ns, id, ok := parseKey(idx, strings.TrimPrefix(kv.key, prefix), kv.value)
			if !ok {
				ck.add(Violation{Kind: KindOrphan, Key: kv.key, Detail: "malformed index key"})
				continue
			}
			refs[i] = ref{ns, id}
			tk := ck.opts.Prefix + "tasks/" + ns + "/" + id
			if !seen[tk] {
				seen[tk] = true
				need = append(need, tk)
			}
		}
		recs := map[string]*storev1.TaskRecord{}
		for start := 0; start < len(need); start += 100 {
			part := need[start:min(start+100, len(need))]
			gets := make([]clientv3.Op, len(part))
			for i, key := range part {
				gets[i] = clientv3.OpGet(key, clientv3.WithRev(ck.rev))
			}
			resp, err := ck.c.Txn(ctx).Then(gets...).Commit()
			if err != nil {
				return fmt.Errorf("verify: read records: %w", err)
			}
			for i, key := range part {
				if got := resp.Responses[i].GetResponseRange().GetKvs(); len(got) > 0 {
					if rec, err := decode(&mvccKV{key: key, value: got[0].Value}); err == nil {
						recs[key] = rec
					}
				}
			}
		}
		derived := map[string]map[string]string{}
		for i, kv := range kvs {
			r := refs[i]
			if r.id == "" {
				continue
			}
			tk := ck.opts.Prefix + "tasks/" + r.ns + "/" + r.id
			if idx == "ready/" {
				if v, err := store.VersionOf(kv.value); err == nil && v > store.RecordVersion {
					ck.unknownVersion(kv.key, r.ns, r.id, "ready entry", v)
					continue
				}
			}
			rec, ok := recs[tk]
			if !ok {
				ck.add(Violation{Kind: KindOrphan, Key: kv.key, Namespace: r.ns, TaskID: r.id, Detail: "no task record"})
				continue
			}
			if rec.GetRecordVersion() > store.RecordVersion {
				continue // the record is reported; its keys are a newer Reeve's to judge
			}
			d, ok := derived[tk]
			if !ok {
				d = ck.st.DerivedKeys(rec)
				derived[tk] = d
			}
			switch val, ok := d[kv.key]; {
			case !ok && slices.Contains(legacyIndexes, idx):
				ck.add(Violation{Kind: KindMismatch, Key: kv.key, Namespace: r.ns, TaskID: r.id,
					Detail: "a key of an index of an older layout, which nothing reads; a scheduler deletes them at start"})
			case !ok:
				ck.add(Violation{Kind: KindMismatch, Key: kv.key, Namespace: r.ns, TaskID: r.id,
					Detail: fmt.Sprintf("the %s task's record does not imply this key", rec.GetTask().GetState())})
			case val != string(kv.value):
				ck.add(Violation{Kind: KindMismatch, Key: kv.key, Namespace: r.ns, TaskID: r.id,
					Detail: "the key's value differs from what the record implies"})
			}
		}
		return nil
	})
}

// unknownVersion reports a record of a version newer than this Reeve
// knows.
func (ck *checker) unknownVersion(key, ns, id, what string, v uint32) {
	ck.add(Violation{Kind: KindUnknownVersion, Key: key, Namespace: ns, TaskID: id,
		Detail: fmt.Sprintf("%s of version %d, newer than this Reeve knows (%d): its schedulers leave it as it is and this check does not judge it; upgrade Reeve", what, v, store.RecordVersion)})
}

// scanVersions reports every value under an index of records other than
// tasks (workflows/, alerts/, agents/, disconnected/) of an unknown
// version. The value's first path segment below it is its namespace.
func (ck *checker) scanVersions(ctx context.Context, idx string) error {
	prefix := ck.opts.Prefix + idx
	what := map[string]string{"workflows/": "workflow", "alerts/": "alert", "agents/": "agent record", "disconnected/": "agent record"}[idx]
	return ck.pages(ctx, prefix, false, func(kvs []*mvccKV) error {
		for _, kv := range kvs {
			v, err := store.VersionOf(kv.value)
			if err != nil {
				ck.add(Violation{Kind: KindUndecodable, Key: kv.key, Detail: err.Error()})
				continue
			}
			if v > store.RecordVersion {
				ns, _, _ := strings.Cut(strings.TrimPrefix(kv.key, prefix), "/")
				ck.unknownVersion(kv.key, ns, "", what, v)
			}
		}
		return nil
	})
}

// legacyIndexes are the indexes of older layouts (store/keys.go).
var legacyIndexes = []string{"states/", "created/", "created-wf/"}

// parseIndexKey returns the task an index key (below its index prefix)
// belongs to:
//
//	ready/<ns>/<task-id>/<step>
//	deadlines/<at>/<ns>/<task-id>/<step>/<attempt>
//	created-state/<ns>/<STATE>/<age>/<task-id>
//	created-wf-state/<ns>/<workflow>/<STATE>/<age>/<task-id>
//	beating/<ns>/<agent-id>/<task-id>/<step>/<attempt>
//	ended/<at>/<ns>/<task-id>
//	labels/<ns>/<key>=<value>/<age>/<task-id>
//	waiting/<ns>/<since>/<task-id>/<step>
//	starting/<ns>/<workflow>/<age>/<task-id>
//	states/<ns>/<STATE>/<task-id> (before issue 15)
//	created/<ns>/<age>/<task-id> (before its sixth pass)
//	created-wf/<ns>/<workflow>/<age>/<task-id> (before its sixth pass)
func parseIndexKey(idx, rest string) (ns, id string, ok bool) {
	p := strings.Split(rest, "/")
	switch {
	case idx == "ready/" && len(p) == 3:
		return p[0], p[1], true
	case idx == "deadlines/" && len(p) == 5:
		return p[1], p[2], true
	case idx == "created-state/" && len(p) == 4:
		return p[0], p[3], true
	case idx == "created-wf-state/" && len(p) == 5:
		return p[0], p[4], true
	case idx == "beating/" && len(p) == 5:
		return p[0], p[2], true
	case idx == "ended/" && len(p) == 3:
		return p[1], p[2], true
	case idx == "labels/" && len(p) == 4:
		return p[0], p[3], true
	case idx == "waiting/" && len(p) == 4:
		return p[0], p[2], true
	case idx == "starting/" && len(p) == 4:
		return p[0], p[3], true
	case idx == "states/" && len(p) == 3:
		return p[0], p[2], true
	case idx == "created/" && len(p) == 3:
		return p[0], p[2], true
	case idx == "created-wf/" && len(p) == 4:
		return p[0], p[3], true
	}
	return "", "", false
}

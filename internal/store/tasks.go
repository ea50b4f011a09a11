package store

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// maxUpdateRetries bounds how often Update re-applies its function after
// losing a race to another writer of the same task.
const maxUpdateRetries = 20

// Versioned is a task record with the etcd mod revision it was read at.
type Versioned struct {
	Record   *storev1.TaskRecord
	Revision int64
}

// CreateTask stores a new task record and its indexes unless the task id is
// taken. If it is taken, the existing record is returned with created=false.
// Concurrent writes are committed together (see batch.go).
func (s *Store) CreateTask(ctx context.Context, rec *storev1.TaskRecord) (existing *storev1.TaskRecord, created bool, err error) {
	t := rec.GetTask()
	res := s.commits.do(&writeReq{ctx: ctx, ns: t.GetNamespace(), id: t.GetId(), key: s.k.task(t.GetNamespace(), t.GetId()), create: rec})
	if res.err != nil {
		return nil, false, ctxErr(ctx, res.err)
	}
	return res.after, res.created, nil
}

// CreateTaskOfLatest is CreateTask for a task whose workflow snapshot was
// returned by WorkflowForSubmit as the latest version: its transaction also
// checks that no next version of the workflow exists (a compare on the
// create revision of workflows/<ns>/<name>/<v+1>). If one does, nothing is
// written and the error is ErrStaleWorkflow (unless the task id is taken:
// the existing task is returned as by CreateTask).
func (s *Store) CreateTaskOfLatest(ctx context.Context, rec *storev1.TaskRecord) (existing *storev1.TaskRecord, created bool, err error) {
	t := rec.GetTask()
	w := t.GetWorkflow()
	next := s.k.workflow(w.GetNamespace(), w.GetName(), w.GetVersion()+1)
	res := s.commits.do(&writeReq{ctx: ctx, ns: t.GetNamespace(), id: t.GetId(), key: s.k.task(t.GetNamespace(), t.GetId()), create: rec, absent: next})
	if errors.Is(res.err, ErrStaleWorkflow) {
		s.workflows.stale(s.k.workflowVersions(w.GetNamespace(), w.GetName()), w.GetVersion())
	}
	if res.err != nil {
		return nil, false, ctxErr(ctx, res.err)
	}
	return res.after, res.created, nil
}

// GetTask returns a task record. Reads are linearizable.
func (s *Store) GetTask(ctx context.Context, ns, id string) (Versioned, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.task(ns, id))
	if err != nil {
		return Versioned{}, etcdErr(ctx, "get task", err)
	}
	if len(resp.Kvs) == 0 {
		return Versioned{}, notFound(KindTask, ns, id, "task %q in namespace %q", id, ns)
	}
	return unmarshalTask(resp.Kvs[0])
}

// TaskExists reports whether etcd holds task id of namespace ns (a
// count-only read), and the revision it was read at.
func (s *Store) TaskExists(ctx context.Context, ns, id string) (exists bool, rev int64, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.task(ns, id), clientv3.WithCountOnly())
	if err != nil {
		return false, 0, etcdErr(ctx, "get task", err)
	}
	return resp.Count > 0, resp.Header.Revision, nil
}

// TasksExist returns which of the given ids of namespace ns etcd holds
// (count-only reads, linearizable, up to 100 ids per transaction): the map
// holds those only, each true.
func (s *Store) TasksExist(ctx context.Context, ns string, ids []string) (map[string]bool, error) {
	batch := min(100, s.maxTxnOps)
	exist := map[string]bool{}
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		gets := make([]clientv3.Op, len(part))
		for i, id := range part {
			gets[i] = clientv3.OpGet(s.k.task(ns, id), clientv3.WithCountOnly())
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Txn(octx).Then(gets...).Commit()
		cancel()
		if err != nil {
			return nil, etcdErr(ctx, "get tasks", err)
		}
		for i, id := range part {
			if resp.Responses[i].GetResponseRange().GetCount() > 0 {
				exist[id] = true
			}
		}
	}
	return exist, nil
}

// UpdateTask applies fn to a copy of the task and writes the result, with
// the index changes it implies, in one transaction guarded by the record's
// mod revision and by fences (e.g. a supervisor's leadership). When another
// writer got there first, fn runs again on the fresh record. An error from
// fn aborts the update and is returned as is. It returns the record before
// and after the update. Concurrent updates of different tasks are
// committed together, each with its own compare (see batch.go); fn may run
// on another goroutine than the caller's, and more than once.
func (s *Store) UpdateTask(ctx context.Context, ns, id string, fn func(*reevev1.Task) error, fences ...clientv3.Cmp) (before, after *storev1.TaskRecord, err error) {
	res := s.commits.do(&writeReq{ctx: ctx, ns: ns, id: id, key: s.k.task(ns, id), fn: fn, fences: fences})
	if res.err != nil {
		return res.before, nil, ctxErr(ctx, res.err)
	}
	return res.before, res.after, nil
}

// UpdateTaskClaiming is UpdateTask for a write whose transition may take a
// max_running slot (Step.slot) on the way (a claim inside another write):
// when only the slot's compare fails, slotLost is called and fn runs again
// on the same record, and must then take none (instead of the write
// failing with ErrSlotTaken).
func (s *Store) UpdateTaskClaiming(ctx context.Context, ns, id string, fn func(*reevev1.Task) error, slotLost func(), fences ...clientv3.Cmp) (before, after *storev1.TaskRecord, err error) {
	res := s.commits.do(&writeReq{ctx: ctx, ns: ns, id: id, key: s.k.task(ns, id), fn: fn, fences: fences, slotLost: slotLost})
	if res.err != nil {
		return res.before, nil, ctxErr(ctx, res.err)
	}
	return res.before, res.after, nil
}

// ctxErr makes a write that failed after its caller gave up report the
// caller's context error, as etcdErr does for direct requests.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ErrUnavailable) {
		return ctx.Err()
	}
	return err
}

// ListTasks returns up to limit tasks of a namespace in id order, starting
// after the id `after`. more reports whether tasks remain. (Listings by
// state, workflow or time go through QueryTasks and the created indexes.)
func (s *Store) ListTasks(ctx context.Context, ns string, after string, limit int) (tasks []*reevev1.Task, more bool, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	prefix := s.k.tasksOf(ns)
	resp, err := s.c.Get(octx, rangeStart(prefix, after), clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(int64(limit+1)))
	if err != nil {
		return nil, false, etcdErr(ctx, "list tasks", err)
	}
	for i, kv := range resp.Kvs {
		if i == limit {
			return tasks, true, nil
		}
		v, err := unmarshalTask(kv)
		if err != nil {
			return nil, false, err
		}
		tasks = append(tasks, v.Record.GetTask())
	}
	return tasks, false, nil
}

// WatchTask calls fn with the task's current record and again after every
// change, until fn returns stop, ctx ends, or the task is deleted (ErrNotFound).
func (s *Store) WatchTask(ctx context.Context, ns, id string, fn func(*reevev1.Task) (stop bool)) error {
	key := s.k.task(ns, id)
	for {
		cur, err := s.GetTask(ctx, ns, id)
		if err != nil {
			return err
		}
		if fn(cur.Record.GetTask()) {
			return nil
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.c.Watch(wctx, key, clientv3.WithRev(cur.Revision+1))
		stop, err := s.followTask(wch, fn)
		cancel()
		if stop || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The watch ended (compaction, leader loss, reconnect): read again.
	}
}

func (s *Store) followTask(wch clientv3.WatchChan, fn func(*reevev1.Task) bool) (stop bool, err error) {
	for wr := range wch {
		if wr.Err() != nil {
			return false, nil
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return true, notFound(KindTask, "", "", "task (removed after its retention)")
			}
			v, err := unmarshalTask(ev.Kv)
			if err != nil {
				return true, err
			}
			if fn(v.Record.GetTask()) {
				return true, nil
			}
		}
	}
	return false, nil
}

func rangeStart(prefix, after string) string {
	if after == "" {
		return prefix
	}
	return prefix + after + "\x00"
}

// marshal encodes m deterministically. The string shares the encoder's
// fresh buffer instead of copying it (a task record is ~1.5 KB, encoded
// once per write): nothing else holds or modifies that buffer.
func marshal(m proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("store: marshal: %w", err)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

func unmarshalTask(kv *mvccpb.KeyValue) (Versioned, error) {
	rec := &storev1.TaskRecord{}
	if err := UnmarshalRecord(kv.Value, rec); err != nil {
		return Versioned{}, fmt.Errorf("store: decode %s: %w", kv.Key, err)
	}
	return Versioned{Record: rec, Revision: kv.ModRevision}, nil
}

// IsNotFound reports whether err means a missing task or workflow.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

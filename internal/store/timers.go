package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// appendTimerKeys appends the task-level keys of the deadline index
// (taskstate/timers.go): <start_time>/<ns>/<id>/@start/0 while the task
// waits for its start time (start_time plus start_backstop, when the
// scheduler that created it starts it itself), <deadline>/<ns>/<id>/@deadline/0
// while its deadline is in force. A sleeping step's key is a step's (its
// complete-by), appended with the other steps'.
func (k keys) appendTimerKeys(dst []indexKey, rec *storev1.TaskRecord) []indexKey {
	t := rec.GetTask()
	ns, id := t.GetNamespace(), t.GetId()
	if at, ok := taskstate.AwaitingStart(t); ok {
		if b := t.GetStartBackstop(); b != nil {
			at = at.Add(b.AsDuration())
		}
		dst = append(dst, indexKey{k.deadline(at, ns, id, taskstate.StartMark, 0), ""})
		// The tasks waiting to start, by namespace and workflow, for
		// CountTasks (CountStarting).
		if ct := t.GetCreateTime(); ct != nil {
			var ab [20]byte
			dst = append(dst, indexKey{k.starting(ns, t.GetWorkflow().GetName(), string(appendAge(ab[:0], ct.AsTime())), id), ""})
		}
	}
	if at, ok := taskstate.TaskDeadline(t); ok {
		dst = append(dst, indexKey{k.deadline(at, ns, id, taskstate.DeadlineMark, 0), ""})
	}
	return dst
}

// starting is the key of a task waiting for its start time:
// starting/<ns>/<workflow>/<age>/<task-id> (the workflow empty for an
// unnamed inline one).
func (k keys) starting(ns, wf, age, id string) string {
	return k.prefix + "starting/" + ns + "/" + wf + "/" + age + "/" + id
}

// startingOf is the prefix of a namespace's tasks waiting to start, of one
// workflow when wf is not empty.
func (k keys) startingOf(ns, wf string) string {
	if wf == "" {
		return k.prefix + "starting/" + ns + "/"
	}
	return k.prefix + "starting/" + ns + "/" + wf + "/"
}

// CountStarting counts a namespace's tasks waiting for their start time
// (of one workflow when wf is not empty) at revision rev (0: now), with
// one count-only range over the starting/ index: etcd walks the keys of
// the tasks counted and returns none.
func (s *Store) CountStarting(ctx context.Context, ns, wf string, rev int64) (int64, error) {
	prefix := s.k.startingOf(ns, wf)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithCountOnly(), clientv3.WithRev(rev))
	if err != nil {
		return 0, etcdErr(ctx, "count tasks waiting to start", err)
	}
	return resp.Count, nil
}

package store

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// indexKeys returns every index key a task record implies, with its value.
// The indexes are a pure function of the record, so writing the difference
// between the old and new record's keys in the record's own transaction keeps
// them exact.
func (k keys) indexKeys(rec *storev1.TaskRecord) map[string]string {
	t := rec.GetTask()
	ns, id := t.GetNamespace(), t.GetId()
	out := map[string]string{
		k.stateOf(ns, t.GetState().String()) + id: "",
	}
	// The created indexes: one key per listing order (see keys.go). A record
	// without a create time (none is written so) has none.
	if ct := t.GetCreateTime(); ct != nil {
		a := age(ct.AsTime())
		st, wf := t.GetState().String(), t.GetWorkflow().GetName()
		out[k.createdOf(ns, "", "")+a+"/"+id] = ""
		out[k.createdOf(ns, "", st)+a+"/"+id] = ""
		if wf != "" {
			out[k.createdOf(ns, wf, "")+a+"/"+id] = ""
			out[k.createdOf(ns, wf, st)+a+"/"+id] = ""
		}
	}
	if taskstate.TerminalTask(t.GetState()) && t.GetEndTime() != nil {
		out[k.ended(t.GetEndTime().AsTime(), ns, id)] = t.GetState().String()
	}
	for _, s := range t.GetSteps() {
		switch {
		case taskstate.Queued(s):
			entry := &storev1.ReadyEntry{
				Namespace:    ns,
				TaskId:       id,
				Step:         s.GetName(),
				Type:         taskstate.ExecutionType(t, s),
				Attempt:      s.GetAttempt(),
				NotBefore:    s.GetNotBefore(),
				Compensation: taskstate.Compensating(s),
			}
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(entry)
			if err != nil {
				panic(err) // a well-formed message always marshals
			}
			out[k.ready(ns, id, s.GetName())] = string(b)
		}
		// A dispatched execution with a heartbeat timeout is indexed by its
		// agent, so that when the agent is lost with its scheduler (whose
		// memory held the beats) the supervisor finds its executions.
		if taskstate.Dispatched(s) && s.GetLockedByAgent() != "" && taskstate.Spec(t, s.GetName()).GetHeartbeatTimeout() != nil {
			out[k.beating(ns, s.GetLockedByAgent(), id, s.GetName(), s.GetAttempt())] = ""
		}
		// Every execution someone must act on by a time has one deadline
		// key: a dispatched one at its complete-by, a queued one with a
		// schedule-to-start timeout at its schedule-to-start deadline.
		if at, ok := taskstate.Deadline(s); ok {
			out[k.deadline(at, ns, id, s.GetName(), s.GetAttempt())] = ""
		}
	}
	return out
}

// indexOps returns the puts and deletes that turn the indexes of before
// (nil for a new task) into those of after (nil for a deleted task).
func (k keys) indexOps(before, after *storev1.TaskRecord) []clientv3.Op {
	var old, cur map[string]string
	if before != nil {
		old = k.indexKeys(before)
	}
	if after != nil {
		cur = k.indexKeys(after)
	}
	var ops []clientv3.Op
	// A task that leaves the ready queue entirely (it ended, or nothing of
	// it is queued any more) drops all its ready keys with one range
	// delete, which counts as one operation of etcd's per-transaction
	// limit instead of one per step (see CheckWorkflowOps). Its ready keys
	// share the prefix ready/<ns>/<task-id>/, which no other task's keys
	// have, since ids contain no "/".
	var readyAll string
	if before != nil {
		t := before.GetTask()
		readyAll = k.ready(t.GetNamespace(), t.GetId(), "")
		if countPrefix(old, readyAll) < 2 || countPrefix(cur, readyAll) > 0 {
			readyAll = ""
		} else {
			ops = append(ops, clientv3.OpDelete(readyAll, clientv3.WithPrefix()))
		}
	}
	for key, v := range cur {
		if ov, ok := old[key]; !ok || ov != v {
			ops = append(ops, clientv3.OpPut(key, v))
		}
	}
	for key := range old {
		if readyAll != "" && strings.HasPrefix(key, readyAll) {
			continue
		}
		if _, ok := cur[key]; !ok {
			ops = append(ops, clientv3.OpDelete(key))
		}
	}
	return ops
}

func countPrefix(m map[string]string, prefix string) int {
	n := 0
	for key := range m {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// DerivedKeys returns every index key (full etcd key, below the store's
// prefix) that rec implies, with its value: what the record's own
// transactions keep in etcd next to it. For consistency checkers (reeve
// verify).
func (s *Store) DerivedKeys(rec *storev1.TaskRecord) map[string]string { return s.k.indexKeys(rec) }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.k.prefix }

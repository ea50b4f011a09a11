package store

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// indexKey is one index key a task record implies, with its value.
type indexKey struct{ key, val string }

// appendIndexKeys appends every index key a task record implies, with its
// value, in a fixed order. The indexes are a pure function of the record,
// so writing the difference between the old and new record's keys in the
// record's own transaction keeps them exact. Each key is built in one
// allocation (this runs twice per task write).
func (k keys) appendIndexKeys(dst []indexKey, rec *storev1.TaskRecord) []indexKey {
	t := rec.GetTask()
	ns, id := t.GetNamespace(), t.GetId()
	var buf []byte
	build := func(parts ...string) string {
		buf = buf[:0]
		for _, p := range parts {
			buf = append(buf, p...)
		}
		return string(buf)
	}
	// The created indexes, by state and by workflow and state (see
	// keys.go). A record without a create time (none is written so) has
	// none. They also serve the counts by state. A terminal task whose
	// record says ended_unindexed has none either: its ended key's value
	// says what they would (unindexed.go).
	terminal := taskstate.TerminalTask(t.GetState())
	unindexed := terminal && rec.GetEndedUnindexed() && t.GetCreateTime() != nil
	var a string
	if ct := t.GetCreateTime(); ct != nil {
		var ab [20]byte
		a = string(appendAge(ab[:0], ct.AsTime()))
	}
	if a != "" && !unindexed {
		st, wf := t.GetState().String(), t.GetWorkflow().GetName()
		dst = append(dst, indexKey{build(k.prefix, "created-state/", ns, "/", st, "/", a, "/", id), ""})
		if wf != "" {
			dst = append(dst, indexKey{build(k.prefix, "created-wf-state/", ns, "/", wf, "/", st, "/", a, "/", id), ""})
		}
	}
	// The label index, one key a label, whatever the state, until the task
	// leaves etcd (also when it ended unindexed): lists by label filter the
	// rest as they read (list.go).
	if a != "" {
		for _, lk := range slices.Sorted(maps.Keys(t.GetLabels())) {
			dst = append(dst, indexKey{build(k.prefix, "labels/", ns, "/", lk, "=", t.GetLabels()[lk], "/", a, "/", id), ""})
		}
	}
	if terminal && t.GetEndTime() != nil {
		val := t.GetState().String()
		if unindexed {
			val = build(val, "/", a, "/", t.GetWorkflow().GetName())
		}
		dst = append(dst, indexKey{k.ended(t.GetEndTime().AsTime(), ns, id), val})
	}
	for _, s := range t.GetSteps() {
		// A paused task's queued steps wait outside the ready queue, with no
		// schedule-to-start deadline (taskstate/pause.go).
		if taskstate.Dispatchable(t, s) {
			entry := &storev1.ReadyEntry{
				Namespace:    ns,
				TaskId:       id,
				Step:         s.GetName(),
				Type:         taskstate.ExecutionType(t, s),
				Attempt:      s.GetAttempt(),
				NotBefore:    s.GetNotBefore(),
				Compensation: taskstate.Compensating(s),
				// 0 and empty (the default) are not encoded: the entry
				// of a task without them is as before.
				Priority:    t.GetPriority(),
				FairnessKey: t.GetFairnessKey(),
			}
			entry.ConcurrencyKey, entry.ConcurrencyMax = KeyID(t, s) // queues.go
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(entry)
			if err != nil {
				panic(err) // a well-formed message always marshals
			}
			dst = append(dst, indexKey{k.ready(ns, id, s.GetName()), string(b)})
		}
		// A dispatched execution with a heartbeat timeout or a
		// reassign_after_disconnect is indexed by its agent, so that when the
		// agent is lost with its scheduler (whose memory held the beats and
		// saw the stream) the supervisor finds its executions.
		if taskstate.Dispatched(s) && s.GetLockedByAgent() != "" && disconnectGraced(taskstate.Spec(t, s.GetName())) {
			dst = append(dst, indexKey{k.beating(ns, s.GetLockedByAgent(), id, s.GetName(), s.GetAttempt()), ""})
		}
		// Every execution someone must act on by a time has one deadline
		// key: a dispatched or waiting one at its complete-by (a paused
		// task's too: they are not the scheduler's to hold back), a queued
		// one with a schedule-to-start timeout at its schedule-to-start
		// deadline. A dispatched attempt whose claim took a max_running
		// slot has its complete-by in the slot key's value instead
		// (slotDeadline, queues.go).
		if at, ok := taskstate.Deadline(s); ok && (taskstate.Dispatched(s) || taskstate.Waiting(s) || !t.GetPaused()) && !slotDeadline(s) {
			dst = append(dst, indexKey{k.deadline(at, ns, id, s.GetName(), s.GetAttempt()), ""})
		}
		// A step waiting for a completion from outside is listed for those
		// who complete it (waiting.go).
		if w, ok := k.waitingIndex(t, s); ok {
			dst = append(dst, w)
		}
	}
	// The max_running slots its dispatched attempts hold (queues.go).
	dst = k.appendSlotKeys(dst, t)
	return k.appendTimerKeys(dst, rec) // timers.go
}

// indexKeys returns every index key a task record implies, with its value.
func (k keys) indexKeys(rec *storev1.TaskRecord) map[string]string {
	ks := k.appendIndexKeys(nil, rec)
	out := make(map[string]string, len(ks))
	for _, e := range ks {
		out[e.key] = e.val
	}
	return out
}

// indexOps returns the puts and deletes that turn the indexes of before
// (nil for a new task) into those of after (nil for a deleted task).
func (k keys) indexOps(before, after *storev1.TaskRecord) []clientv3.Op {
	var old, cur []indexKey
	if before != nil {
		old = k.appendIndexKeys(make([]indexKey, 0, 8), before)
	}
	if after != nil {
		cur = k.appendIndexKeys(make([]indexKey, 0, 8), after)
	}
	ops := make([]clientv3.Op, 0, len(old)+len(cur))
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
	// Both lists hold a handful of keys (two per queued step beyond the
	// fixed ones), so a linear lookup beats building maps; a wide task
	// uses a map.
	find := func(list []indexKey) func(string) (string, bool) {
		if len(list) <= 32 {
			return func(key string) (string, bool) {
				for _, e := range list {
					if e.key == key {
						return e.val, true
					}
				}
				return "", false
			}
		}
		m := make(map[string]string, len(list))
		for _, e := range list {
			m[e.key] = e.val
		}
		return func(key string) (string, bool) { v, ok := m[key]; return v, ok }
	}
	inOld, inCur := find(old), find(cur)
	for _, e := range cur {
		if ov, ok := inOld(e.key); !ok || ov != e.val {
			ops = append(ops, clientv3.OpPut(e.key, e.val))
		}
	}
	for _, e := range old {
		if readyAll != "" && strings.HasPrefix(e.key, readyAll) {
			continue
		}
		if _, ok := inCur(e.key); !ok {
			ops = append(ops, clientv3.OpDelete(e.key))
		}
	}
	return ops
}

func countPrefix(list []indexKey, prefix string) int {
	n := 0
	for _, e := range list {
		if strings.HasPrefix(e.key, prefix) {
			n++
		}
	}
	return n
}

// appendAge appends the age of a creation time (see the key layout): 20
// digits, zero-padded.
func appendAge(dst []byte, created time.Time) []byte {
	return appendPadded(dst, ageOf(created))
}

// appendPadded appends n (not negative) as 20 zero-padded digits.
func appendPadded(dst []byte, n int64) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	for range 20 - len(s) {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// DerivedKeys returns every index key (full etcd key, below the store's
// prefix) that rec implies, with its value: what the record's own
// transactions keep in etcd next to it. For consistency checkers (reeve
// verify).
func (s *Store) DerivedKeys(rec *storev1.TaskRecord) map[string]string { return s.k.indexKeys(rec) }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.k.prefix }

func disconnectGraced(spec *reevev1.StepSpec) bool {
	_, ok := workflow.DisconnectGrace(spec)
	return ok
}

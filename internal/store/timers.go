package store

import (
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// appendTimerKeys appends the task-level keys of the deadline index
// (taskstate/timers.go): <start_time>/<ns>/<id>/@start/0 while the task
// waits for its start time, <deadline>/<ns>/<id>/@deadline/0 while its
// deadline is in force. A sleeping step's key is a step's (its
// complete-by), appended with the other steps'.
func (k keys) appendTimerKeys(dst []indexKey, rec *storev1.TaskRecord) []indexKey {
	t := rec.GetTask()
	ns, id := t.GetNamespace(), t.GetId()
	if at, ok := taskstate.AwaitingStart(t); ok {
		dst = append(dst, indexKey{k.deadline(at, ns, id, taskstate.StartMark, 0), ""})
	}
	if at, ok := taskstate.TaskDeadline(t); ok {
		dst = append(dst, indexKey{k.deadline(at, ns, id, taskstate.DeadlineMark, 0), ""})
	}
	return dst
}

package store

import (
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// DefaultPrefix is the key prefix of a store not given WithPrefix.
const DefaultPrefix = "/reeve/"

// Layout names the store's keys below one prefix (keys.go lists the
// layout), for the programs that read etcd beside the store rather than
// through it: the chaos suite's checker, the benchmarks and the failover
// measurement. Only the store writes these keys; a reader that builds them
// with Layout follows a change of the layout. The zero Layout has no
// prefix: use NewLayout.
type Layout struct{ k keys }

// NewLayout returns the layout below prefix; "" is DefaultPrefix.
func NewLayout(prefix string) Layout {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Layout{keys{prefix: prefix}}
}

// Task is the key of a task's record (storev1.TaskRecord, read with
// UnmarshalRecord). With an id prefix instead of an id, it is the prefix of
// the records of the tasks whose ids start with it.
func (l Layout) Task(ns, id string) string { return l.k.task(ns, id) }

// Tasks is the prefix of namespace ns's task records; with ns "", of every
// namespace's.
func (l Layout) Tasks(ns string) string { return everyNamespace(l.k.tasksOf(ns), ns) }

// Deadlines is the prefix of the deadline index: an empty key per
// execution with a deadline, ordered by it.
func (l Layout) Deadlines() string { return l.k.deadlinePrefix() }

// Deadline is the deadline key of one execution, due at completeBy: the
// key a dispatched step's complete-by is indexed under.
func (l Layout) Deadline(completeBy time.Time, ns, id, step string, attempt int32) string {
	return l.k.deadline(completeBy, ns, id, step, attempt)
}

// Slots is the prefix of the max_running slot keys, which also index the
// complete-by of the attempts holding them (slotdeadlines.go).
func (l Layout) Slots() string { return l.k.slotsPrefix() }

// StepDeadline is the key that indexes a dispatched step's complete-by,
// with the value it holds: a deadline key (value "") or, for an attempt
// whose claim took a max_running slot, its slot key.
func (l Layout) StepDeadline(t *reevev1.Task, s *reevev1.Step) (key, value string) {
	if slotDeadline(s) {
		for _, e := range l.k.appendSlotKeys(nil, t) {
			if e.key == l.k.slot(t.GetNamespace(), taskstate.ExecutionType(t, s), s.GetSlot()) {
				return e.key, e.val
			}
		}
	}
	return l.k.deadline(s.GetCompleteBy().AsTime(), t.GetNamespace(), t.GetId(), s.GetName(), s.GetAttempt()), ""
}

// CreatedState is the prefix of the index of namespace ns's tasks in state
// st, newest first: a count-only range over it counts them.
func (l Layout) CreatedState(ns string, st reevev1.TaskState) string {
	return l.k.createdOf(ns, "", st.String())
}

// Alerts is the prefix of namespace ns's alerts (reeve.v1.Alert).
func (l Layout) Alerts(ns string) string { return l.k.alerts(ns) }

// Agents is the prefix of namespace ns's agent records
// (storev1.AgentRecord, one per connected agent); with ns "", of every
// namespace's.
func (l Layout) Agents(ns string) string { return everyNamespace(l.k.agent(ns, ""), ns) }

// ElectionCandidates is the prefix of the supervisors' election keys: one
// per campaigning supervisor, its id as the value; the oldest (lowest
// create revision) is the leader.
func (l Layout) ElectionCandidates() string { return l.k.election() + "/" }

// everyNamespace turns a per-namespace prefix built for namespace "" (it
// ends "//") into the prefix of every namespace ("/").
func everyNamespace(prefix, ns string) string {
	if ns != "" {
		return prefix
	}
	return strings.TrimSuffix(prefix, "/")
}

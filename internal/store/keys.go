package store

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The key layout, below the store's prefix (default "/reeve/"). Every key but
// the task, workflow and agent keys is an index derived from a task record
// and written in the same transaction as the record (see index.go).
//
//	tasks/<ns>/<task-id>                        TaskRecord (the whole task)
//	workflows/<ns>/<name>/<version:%010d>       reeve.v1.Workflow
//	ready/<ns>/<task-id>/<step>                 ReadyEntry: the ready queue
//	deadlines/<complete-by:%020d>/<ns>/<task-id>/<step>/<attempt>
//	                                            empty: executions by deadline (unix ns): dispatched ones
//	                                            at complete-by, queued ones at their schedule-to-start deadline
//	ended/<end-time:%020d>/<ns>/<task-id>       state name: terminal tasks by end time, for retention;
//	                                            "<state>/<age>/<workflow>" for a task that ended
//	                                            unindexed, which lists and counts find here (unindexed.go)
//	created-state/<ns>/<TASK_STATE_X>/<age>/<task-id>
//	                                            empty: tasks of one state, newest first (see below);
//	                                            also what counts by state read (count-only ranges)
//	created-wf-state/<ns>/<workflow>/<TASK_STATE_X>/<age>/<task-id>
//	                                            empty: tasks of one workflow in one state, newest first
//	meta/created-index                          empty: every task written before the created
//	                                            indexes existed has them (see BackfillCreatedIndexes)
//	meta/layout-version                         the version of this layout, decimal ("1"; see
//	                                            layoutversion.go); absent in an etcd written before it existed
//	waiting/<ns>/<since:%020d>/<task-id>/<step> "<attempt> <complete-by ns> <e|d> <workflow>": steps waiting
//	                                            for a completion from outside, oldest first (waiting.go)
//	meta/completion-key                         32 random bytes: the cluster's key of completion tokens
//	                                            (completionkey.go), written once, create-only
//	alerts/<ns>/<alert-id>                      reeve.v1.Alert, written with the record when a task fails
//	beating/<ns>/<agent-id>/<task-id>/<step>/<attempt>
//	                                            empty: dispatched executions with a heartbeat timeout, by agent
//	agents/<ns>/<agent-id>                      AgentRecord, under the scheduler's lease
//	disconnected/<ns>/<agent-id>/<session-id>   AgentRecord (connect_time: when it ended) of a stream that ended while its
//	                                            scheduler still watches the heartbeat deadlines of
//	                                            its executions, under the scheduler's lease
//	agent-load/<ns>/<agent-id>                  "<session-id> <in-flight>", under the scheduler's
//	                                            lease, refreshed every few seconds while it changes
//	schedulers/<scheduler-id>                   empty, under the scheduler's lease
//	moved/<move-time:%020d>/<random>            fingerprints of tasks moved to the archive, for the
//	                                            deduplication window (moved.go)
//	labels/<ns>/<key>=<value>/<age>/<task-id>   empty: tasks of one label, newest first (as created-state); a
//	                                            task's labels are validated to hold no "/" or "="
//	batches/<ns>/<id>                           BatchRecord: a batch job and where its run is (batches.go)
//	batch-owner/<ns>/<id>                       empty: the scheduler running the job, under its lease
//	supervisor/election/...                     concurrency.Election of the supervisors
//	schedules/<ns>/<name>                       reeve.v1.Schedule (schedules.go)
//	schedule-due/<fire-time:%020d>/<ns>/<name>  empty: when the firer next looks at a schedule (unix ns),
//	                                            written with its record; none while paused
//
// A task's state is in two keys (created-state, created-wf-state), moved on
// every state change; with an archive, deleted when the task ends with
// nothing left to act on (unindexed.go). A listing without a state merges the ranges of every
// state (QueryTasks), so no index holds a task regardless of its state: each
// such key would be two more etcd operations per task (its put and its
// delete) and one more key in etcd's in-memory index.
//
// Older layouts, whose leftovers a scheduler deletes at start
// (DropLegacyIndexes): until issue 15, states/<ns>/<TASK_STATE_X>/<task-id>
// held the same as created-state in id order; until the sixth pass of issue
// 15, created/<ns>/<age>/<task-id> and created-wf/<ns>/<workflow>/<age>/<task-id>
// held every task, and every task of a workflow, whatever its state.
//
// <age> is math.MaxInt64 minus the task's create_time in unix ns, as %020d,
// so that etcd's ascending key order is newest first: etcd sorts a range in
// descending order only after reading all of it, while an ascending range
// with a limit stops at the limit.
//
// Names and ids never contain "/" (internal/workflow validates them).
type keys struct{ prefix string }

func (k keys) task(ns, id string) string      { return k.prefix + "tasks/" + ns + "/" + id }
func (k keys) tasksOf(ns string) string       { return k.prefix + "tasks/" + ns + "/" }
func (k keys) workflows(ns string) string     { return k.prefix + "workflows/" + ns + "/" }
func (k keys) readyPrefix() string            { return k.prefix + "ready/" }
func (k keys) deadlinePrefix() string         { return k.prefix + "deadlines/" }
func (k keys) endedPrefix() string            { return k.prefix + "ended/" }
func (k keys) agent(ns, id string) string     { return k.prefix + "agents/" + ns + "/" + id }
func (k keys) agentLoad(ns, id string) string { return k.prefix + "agent-load/" + ns + "/" + id }
func (k keys) disconnected(ns, id, session string) string {
	return k.prefix + "disconnected/" + ns + "/" + id + "/" + session
}
func (k keys) alerts(ns string) string { return k.prefix + "alerts/" + ns + "/" }

// alertsUntil ends the range of a namespace's alerts raised at or before t
// (alert ids start with their time: alertOps).
func (k keys) alertsUntil(ns string, t time.Time) string {
	return fmt.Sprintf("%s%020d", k.alerts(ns), t.UnixNano()+1)
}
func (k keys) scheduler(id string) string { return k.prefix + "schedulers/" + id }
func (k keys) election() string           { return k.prefix + "supervisor/election" }
func (k keys) legacyStates() string       { return k.prefix + "states/" }

// legacyIndexes are the prefixes of indexes older layouts wrote (see above).
func (k keys) legacyIndexes() []string {
	return []string{k.legacyStates(), k.prefix + "created/", k.prefix + "created-wf/"}
}

func (k keys) createdMeta() string   { return k.prefix + "meta/created-index" }
func (k keys) layoutVersion() string { return k.prefix + "meta/layout-version" }

// createdOf returns the prefix of the created index of namespace ns's tasks
// in one state, optionally of one workflow ("" for any).
func (k keys) createdOf(ns, wf, state string) string {
	if wf != "" {
		return k.prefix + "created-wf-state/" + ns + "/" + wf + "/" + state + "/"
	}
	return k.prefix + "created-state/" + ns + "/" + state + "/"
}

// createdPrefixes returns the created indexes a listing of namespace ns
// reads, optionally of one workflow and one state ("" for any): the one
// state's, or one per state.
// labelOf is the prefix of one label's index keys.
func (k keys) labelOf(ns, key, value string) string {
	return k.prefix + "labels/" + ns + "/" + key + "=" + value + "/"
}

func (k keys) createdPrefixes(ns, wf, state string) []string {
	if state != "" {
		return []string{k.createdOf(ns, wf, state)}
	}
	prefixes := make([]string, 0, len(taskStates))
	for _, st := range taskStates {
		prefixes = append(prefixes, k.createdOf(ns, wf, st.String()))
	}
	return prefixes
}

// taskStates are the states a task can be in, in enum order: the created
// indexes a listing without a state merges, and the counts by state.
var taskStates = func() []reevev1.TaskState {
	var states []reevev1.TaskState
	for v := range reevev1.TaskState_name {
		if st := reevev1.TaskState(v); st != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
			states = append(states, st)
		}
	}
	slices.Sort(states)
	return states
}()

// age orders creation times newest first (see the key layout).
func age(created time.Time) string {
	var b [20]byte
	return string(appendAge(b[:0], created))
}

// parseAge inverts age.
func parseAge(s string) (time.Time, error) {
	if len(s) != 20 {
		return time.Time{}, fmt.Errorf("age %q: not 20 digits", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("age %q: not a non-negative integer", s)
	}
	return time.Unix(0, math.MaxInt64-n), nil
}

func (k keys) workflow(ns, name string, version int32) string {
	return fmt.Sprintf("%s%s/%010d", k.workflows(ns), name, version)
}

func (k keys) workflowVersions(ns, name string) string { return k.workflows(ns) + name + "/" }

func (k keys) beatingPrefix() string { return k.prefix + "beating/" }

func (k keys) beatingOf(ns, agent string) string {
	return k.beatingPrefix() + ns + "/" + agent + "/"
}

func (k keys) beating(ns, agent, id, step string, attempt int32) string {
	b := make([]byte, 0, len(k.prefix)+len(ns)+len(agent)+len(id)+len(step)+24)
	b = append(b, k.prefix...)
	b = append(b, "beating/"...)
	b = append(b, ns...)
	b = append(b, '/')
	b = append(b, agent...)
	b = append(b, '/')
	return string(appendExecution(b, id, step, attempt))
}

func (k keys) ready(ns, id, step string) string {
	return k.readyPrefix() + ns + "/" + id + "/" + step
}

func (k keys) deadline(at time.Time, ns, id, step string, attempt int32) string {
	b := make([]byte, 0, len(k.prefix)+len(ns)+len(id)+len(step)+48)
	b = append(b, k.prefix...)
	b = append(b, "deadlines/"...)
	b = appendTime(b, at.UnixNano())
	b = append(b, '/')
	b = append(b, ns...)
	b = append(b, '/')
	return string(appendExecution(b, id, step, attempt))
}

// appendExecution appends the <task-id>/<step>/<attempt> tail the deadline
// and beating keys end with.
func appendExecution(b []byte, id, step string, attempt int32) []byte {
	b = append(b, id...)
	b = append(b, '/')
	b = append(b, step...)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(attempt), 10)
}

// appendTime appends unix nanoseconds as %020d does (times before 1970,
// which no key holds, through fmt).
func appendTime(dst []byte, nanos int64) []byte {
	if nanos < 0 {
		return fmt.Appendf(dst, "%020d", nanos)
	}
	return appendPadded(dst, nanos)
}

// deadlinesUntil is the exclusive end of the deadline range up to and
// including t.
func (k keys) deadlinesUntil(t time.Time) string {
	return fmt.Sprintf("%s%020d", k.deadlinePrefix(), t.UnixNano()+1)
}

func (k keys) ended(at time.Time, ns, id string) string {
	b := make([]byte, 0, len(k.prefix)+len(ns)+len(id)+30)
	b = append(b, k.prefix...)
	b = append(b, "ended/"...)
	b = appendTime(b, at.UnixNano())
	b = append(b, '/')
	b = append(b, ns...)
	b = append(b, '/')
	return string(append(b, id...))
}

func (k keys) endedUntil(t time.Time) string {
	return fmt.Sprintf("%s%020d", k.endedPrefix(), t.UnixNano()+1)
}

// Deadline names one execution found in the deadline index: dispatched (due
// at its complete-by) or queued with a schedule-to-start deadline.
type Deadline struct {
	CompleteBy time.Time
	Namespace  string
	TaskID     string
	Step       string
	Attempt    int32
}

func (k keys) parseDeadline(key string) (Deadline, error) {
	rest := strings.TrimPrefix(key, k.deadlinePrefix())
	parts := strings.Split(rest, "/")
	if len(parts) != 5 {
		return Deadline{}, fmt.Errorf("store: malformed deadline key %q", key)
	}
	var nanos int64
	var attempt int32
	if _, err := fmt.Sscanf(parts[0], "%d", &nanos); err != nil {
		return Deadline{}, fmt.Errorf("store: malformed deadline key %q: %w", key, err)
	}
	if _, err := fmt.Sscanf(parts[4], "%d", &attempt); err != nil {
		return Deadline{}, fmt.Errorf("store: malformed deadline key %q: %w", key, err)
	}
	return Deadline{CompleteBy: time.Unix(0, nanos), Namespace: parts[1], TaskID: parts[2], Step: parts[3], Attempt: attempt}, nil
}

// prefixEnd returns the end of the range of keys that start with prefix.
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

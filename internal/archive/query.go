package archive

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// toNS and fromNS convert times to the nanosecond columns: the zero time is
// 0, times are returned in UTC.
func toNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// dedupe keeps the last of tasks with the same namespace and id (a batch
// upsert may not touch a row twice), in the order of first appearance.
func dedupe(tasks []Task) []Task {
	type key struct{ ns, id string }
	at := make(map[key]int, len(tasks))
	out := make([]Task, 0, len(tasks))
	for _, t := range tasks {
		k := key{t.Namespace, t.ID}
		if i, ok := at[k]; ok {
			out[i] = t
			continue
		}
		at[k] = len(out)
		out = append(out, t)
	}
	return out
}

// nonNil returns b, or an empty slice for nil (the columns are NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

var errLimit = errors.New("archive: list limit must be at least 1")

// listSQL builds a list query for a dialect. ph returns the placeholder of
// the n-th argument; prefix adds the IDPrefix condition for argument n.
type listSQL struct {
	where []string
	args  []any
	ph    func(n int) string
}

func (l *listSQL) arg(v any) string {
	l.args = append(l.args, v)
	return l.ph(len(l.args))
}

func (l *listSQL) cond(c string) { l.where = append(l.where, c) }

// dialect is what list queries differ in.
type dialect struct {
	// ph returns the placeholder of the n-th argument.
	ph func(n int) string
	// idPrefix adds the condition of an id prefix.
	idPrefix func(l *listSQL, p string)
	// contains is the condition that column col holds the text of
	// placeholder ph.
	contains func(col, ph string) string
	// endBound adds ended_ns >= CreatedAfter - endSlack, so that
	// PostgreSQL skips the partitions of days before it.
	endBound bool
}

// endSlack is how much earlier than its create time a task may end in the
// archive's eyes: none should, but the times may come from the clocks of
// two machines. Put and List rely on it (docs/archive.md).
const endSlack = int64(24 * time.Hour)

// buildList returns the query of q: the columns (record only when q.Full),
// the filters, the keyset position, newest first.
func buildList(q Query, d dialect) (string, []any, error) {
	if q.Limit < 1 {
		return "", nil, errLimit
	}
	l := &listSQL{ph: d.ph}
	l.cond("namespace = " + l.arg(q.Namespace))
	if q.Workflow != "" {
		l.cond("workflow = " + l.arg(q.Workflow))
	}
	if q.State != 0 {
		l.cond("state = " + l.arg(int16(q.State)))
	}
	if !q.CreatedAfter.IsZero() {
		l.cond("created_ns >= " + l.arg(toNS(q.CreatedAfter)))
		if d.endBound {
			l.cond("ended_ns >= " + l.arg(toNS(q.CreatedAfter)-endSlack))
		}
	}
	if !q.CreatedBefore.IsZero() {
		l.cond("created_ns < " + l.arg(toNS(q.CreatedBefore)))
	}
	if q.IDPrefix != "" {
		d.idPrefix(l, q.IDPrefix)
	}
	for _, k := range slices.Sorted(maps.Keys(q.Labels)) {
		l.cond(d.contains("labels", l.arg("\n"+k+"="+q.Labels[k]+"\n")))
	}
	if q.After != nil {
		c := toNS(q.After.Created)
		// created_ns <= c first: a range the index seeks to, not a scan
		// from the newest task.
		pc := l.arg(c)
		l.cond("created_ns <= " + pc)
		l.cond("(created_ns < " + pc + " OR id > " + l.arg(q.After.ID) + ")")
	}
	cols := listColumns
	if q.Full {
		cols += ", record"
	}
	sql := "SELECT " + cols + " FROM archived_tasks WHERE " + strings.Join(l.where, " AND ") +
		" ORDER BY created_ns DESC, id ASC LIMIT " + strconv.Itoa(q.Limit)
	return sql, l.args, nil
}

// countSQL is the query of a count per state of namespace ns (workflow wf
// when not empty) of the tasks with every one of labels.
func countSQL(ns, wf string, labels map[string]string, ph func(int) string, contains func(col, ph string) string) (string, []any) {
	l := &listSQL{ph: ph}
	l.cond("namespace = " + l.arg(ns))
	if wf != "" {
		l.cond("workflow = " + l.arg(wf))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		l.cond(contains("labels", l.arg("\n"+k+"="+labels[k]+"\n")))
	}
	return "SELECT state, count(*) FROM archived_tasks WHERE " + strings.Join(l.where, " AND ") + " GROUP BY state", l.args
}

// labelsText is how the labels column holds a task's labels: "\n" and then
// each "key=value" (sorted) followed by "\n"; "" for none.
func labelsText(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k + "=" + labels[k] + "\n")
	}
	return b.String()
}

// listColumns are the columns every read returns, in scan order.
const listColumns = "namespace, id, workflow, state, created_ns, ended_ns, summary"

// scanner is a row of either driver.
type scanner interface{ Scan(dest ...any) error }

// taskRows are the rows of a list query (pgx.Rows, *sql.Rows).
type taskRows interface {
	scanner
	Next() bool
	Err() error
}

// collectTasks reads the tasks of a list query's rows, at most limit.
func collectTasks(rows taskRows, full bool, limit int) ([]Task, error) {
	tasks := make([]Task, 0, min(limit, 1000))
	for rows.Next() {
		t, err := scanTask(rows, full)
		if err != nil {
			return nil, fmt.Errorf("archive: list: %w", err)
		}
		tasks = append(tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: list: %w", err)
	}
	return tasks, nil
}

// scanTask reads listColumns (and record when full) into a Task.
func scanTask(r scanner, full bool) (Task, error) {
	var (
		t                  Task
		state              int16
		createdNS, endedNS int64
	)
	dest := []any{&t.Namespace, &t.ID, &t.Workflow, &state, &createdNS, &endedNS, &t.Summary}
	if full {
		dest = append(dest, &t.Record)
	}
	if err := r.Scan(dest...); err != nil {
		return Task{}, err
	}
	t.State = stateOf(state)
	t.CreateTime, t.EndTime = fromNS(createdNS), fromNS(endedNS)
	return t, nil
}

// prefixEnd returns the least string greater than every string starting
// with p (byte order), or ok false when there is none (p all 0xff bytes).
func prefixEnd(p string) (end string, ok bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// likeEscape escapes LIKE's metacharacters (and the escape, \) in s.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func stateOf(s int16) reevev1.TaskState { return reevev1.TaskState(s) }

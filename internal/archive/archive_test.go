package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
)

// One PostgreSQL server for the package, a database per test.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	closeFixtures()
	os.Exit(code)
}

// kinds are the implementations every contract test runs against: each
// returns the DSN of an empty archive.
var kinds = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"postgres", func(t *testing.T) string { return pgtest.Start(t) }},
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "archive.db") }},
}

// eachKind runs f as a subtest per implementation, on a fresh archive.
func eachKind(t *testing.T, f func(t *testing.T, a archive.Archive)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			f(t, open(t, k.dsn(t)))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, dsn string) archive.Archive {
	t.Helper()
	a, err := archive.Open(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("Open(%s): %v", archive.Redact(dsn), err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// base is a fixed time with nanoseconds: times must come back exact.
var base = time.Date(2026, 11, 20, 10, 30, 0, 123456789, time.UTC)

func task(ns, id, wf string, state reevev1.TaskState, created time.Time) archive.Task {
	return archive.Task{
		Namespace: ns, ID: id, Workflow: wf, State: state,
		CreateTime: created, EndTime: created.Add(90 * time.Second),
		Summary: []byte("summary of " + id), Record: []byte("record of " + id),
	}
}

func put(t *testing.T, a archive.Archive, tasks ...archive.Task) {
	t.Helper()
	if err := a.Put(ctxT(t), tasks); err != nil {
		t.Fatal(err)
	}
}

func sameTask(t *testing.T, got, want archive.Task) {
	t.Helper()
	if got.Namespace != want.Namespace || got.ID != want.ID || got.Workflow != want.Workflow || got.State != want.State ||
		!got.CreateTime.Equal(want.CreateTime) || !got.EndTime.Equal(want.EndTime) ||
		!bytes.Equal(got.Summary, want.Summary) || !bytes.Equal(got.Record, want.Record) {
		t.Fatalf("task:\n got %+v\nwant %+v", got, want)
	}
}

func TestPutGet(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		want := task("default", "order-1", "checkout", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
		other := task("other", "order-1", "checkout", reevev1.TaskState_TASK_STATE_FAILED, base)
		put(t, a, want, other)
		got, err := a.Get(ctx, "default", "order-1")
		if err != nil {
			t.Fatal(err)
		}
		sameTask(t, got, want)
		if got, _ := a.Get(ctx, "other", "order-1"); got.State != other.State {
			t.Fatalf("namespace other: state %v, want %v", got.State, other.State)
		}
		if _, err := a.Get(ctx, "default", "order-2"); !errors.Is(err, archive.ErrNotFound) {
			t.Fatalf("Get of a task never put: %v, want ErrNotFound", err)
		}
		if err := a.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Putting a task again replaces it: one row, the last Put's contents, also
// when its end time moved to another day (another partition in PostgreSQL)
// and when one batch holds it twice.
func TestPutReplaces(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		first := task("default", "t1", "wf", reevev1.TaskState_TASK_STATE_FAILED, base)
		put(t, a, first)
		put(t, a, first)
		second := first
		second.State = reevev1.TaskState_TASK_STATE_SUCCEEDED
		second.Record = []byte("second")
		put(t, a, second)
		third := second
		third.EndTime = first.EndTime.Add(50 * time.Hour)
		third.Record = []byte("third")
		put(t, a, third)
		got, err := a.Get(ctx, "default", "t1")
		if err != nil {
			t.Fatal(err)
		}
		sameTask(t, got, third)
		// Back to the first day, twice in one batch: the last wins.
		fourth, fifth := third, third
		fourth.EndTime, fourth.Record = first.EndTime, []byte("fourth")
		fifth.EndTime, fifth.Record = first.EndTime.Add(time.Hour), []byte("fifth")
		put(t, a, fourth, fifth)
		got, err = a.Get(ctx, "default", "t1")
		if err != nil {
			t.Fatal(err)
		}
		sameTask(t, got, fifth)
		st, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Tasks != 1 {
			t.Fatalf("Stats.Tasks = %d after putting one task five times, want 1", st.Tasks)
		}
		page, err := a.List(ctx, archive.Query{Namespace: "default", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 1 {
			t.Fatalf("List: %d tasks, want 1", len(page))
		}
	})
}

// Concurrent Puts of one task with different end times leave one row.
func TestPutConcurrentSameTask(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		const writers = 8
		errs := make(chan error, writers)
		for i := range writers {
			go func() {
				tk := task("default", "t1", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
				tk.EndTime = tk.EndTime.Add(time.Duration(i) * 25 * time.Hour)
				other := task("default", fmt.Sprintf("other-%d", i), "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
				errs <- a.Put(ctx, []archive.Task{other, tk})
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		st, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Tasks != writers+1 {
			t.Fatalf("Stats.Tasks = %d, want %d (one row for t1)", st.Tasks, writers+1)
		}
	})
}

// ids returns the ids of tasks, in order.
func ids(tasks []archive.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}

// listAll pages through q with q.Limit per page and returns every task.
func listAll(t *testing.T, a archive.Archive, q archive.Query) []archive.Task {
	t.Helper()
	var all []archive.Task
	for range 10000 {
		page, err := a.List(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < q.Limit {
			return all
		}
		last := page[len(page)-1]
		q.After = &archive.Position{Created: last.CreateTime, ID: last.ID}
	}
	t.Fatal("listAll: more than 10000 pages")
	return nil
}

// expect is the contract of List, in Go: the tasks matching q, newest
// first, ties by id.
func expect(tasks []archive.Task, q archive.Query) []string {
	var out []archive.Task
	for _, t := range tasks {
		if t.Namespace != q.Namespace ||
			(q.State != 0 && t.State != q.State) ||
			(q.Workflow != "" && t.Workflow != q.Workflow) ||
			(!q.CreatedAfter.IsZero() && t.CreateTime.Before(q.CreatedAfter)) ||
			(!q.CreatedBefore.IsZero() && !t.CreateTime.Before(q.CreatedBefore)) ||
			!strings.HasPrefix(t.ID, q.IDPrefix) || !hasLabels(t, q.Labels) {
			continue
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b archive.Task) int {
		if c := b.CreateTime.Compare(a.CreateTime); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return ids(out)
}

func hasLabels(t archive.Task, labels map[string]string) bool {
	for k, v := range labels {
		if got, ok := t.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// corpus is 300 tasks over two namespaces, three workflows, three states,
// created in groups of seven sharing one create time (ties), with ids that
// hold LIKE's metacharacters (_ is valid in task ids; % is not, but the
// archive does not rely on it).
func corpus() []archive.Task {
	wfs := []string{"checkout", "refund", "check"}
	states := []reevev1.TaskState{reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED, reevev1.TaskState_TASK_STATE_CANCELED}
	prefixes := []string{"order-", "order_", "orderx", "ord%r-", "refund."}
	var tasks []archive.Task
	for i := range 300 {
		ns := "default"
		if i%10 == 9 {
			ns = "other"
		}
		id := fmt.Sprintf("%s%03d", prefixes[i%len(prefixes)], (i*37)%1000)
		created := base.Add(time.Duration(i/7) * time.Minute)
		tk := task(ns, id, wfs[i%len(wfs)], states[(i/3)%len(states)], created)
		// Labels: team a or b, every fifth also env=prod, a key that is a
		// prefix of another (tea) on every seventh.
		tk.Labels = map[string]string{"team": []string{"a", "b"}[i%2]}
		if i%5 == 0 {
			tk.Labels["env"] = "prod"
		}
		if i%7 == 0 {
			tk.Labels["tea"] = "m"
		}
		tasks = append(tasks, tk)
	}
	return tasks
}

func TestListOrderAndPaging(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		tasks := corpus()
		put(t, a, tasks...)
		for _, limit := range []int{1, 6, 7, 50, 1000} {
			q := archive.Query{Namespace: "default", Limit: limit}
			got, want := ids(listAll(t, a, q)), expect(tasks, q)
			if !slices.Equal(got, want) {
				t.Fatalf("limit %d: pages give\n%v\nwant\n%v", limit, got, want)
			}
		}
		if _, err := a.List(ctxT(t), archive.Query{Namespace: "default"}); err == nil {
			t.Fatal("List with Limit 0: no error")
		}
	})
}

func TestListFilters(t *testing.T) {
	succeeded, failed := reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED
	tasks := corpus()
	// Bounds exactly on create times of the corpus (inclusive after,
	// exclusive before).
	after, before := base.Add(10*time.Minute), base.Add(30*time.Minute)
	queries := []archive.Query{
		{Namespace: "other"},
		{Namespace: "nobody"},
		{Namespace: "default", State: failed},
		{Namespace: "default", Workflow: "check"},
		{Namespace: "default", Workflow: "checkout", State: succeeded},
		{Namespace: "default", CreatedAfter: after},
		{Namespace: "default", CreatedBefore: before},
		{Namespace: "default", CreatedAfter: after, CreatedBefore: before},
		{Namespace: "default", CreatedAfter: after, CreatedBefore: after},
		{Namespace: "default", IDPrefix: "order"},
		{Namespace: "default", IDPrefix: "order_"},
		{Namespace: "default", IDPrefix: "order-0"},
		{Namespace: "default", IDPrefix: "ord%"},
		{Namespace: "default", IDPrefix: "ord_"},
		{Namespace: "default", IDPrefix: "%"},
		{Namespace: "default", IDPrefix: "refund.1"},
		{Namespace: "default", Workflow: "refund", State: failed, CreatedAfter: after, CreatedBefore: before, IDPrefix: "order"},
		{Namespace: "default", Workflow: "checkout", CreatedAfter: after, IDPrefix: "order_"},
		{Namespace: "default", State: succeeded, CreatedBefore: before, IDPrefix: "refund."},
		{Namespace: "default", Labels: map[string]string{"team": "a"}},
		{Namespace: "default", Labels: map[string]string{"team": "a", "env": "prod"}},
		{Namespace: "default", Labels: map[string]string{"tea": "m"}},
		{Namespace: "default", Labels: map[string]string{"team": "c"}},
		{Namespace: "default", State: failed, Labels: map[string]string{"env": "prod"}, CreatedAfter: after},
	}
	eachKind(t, func(t *testing.T, a archive.Archive) {
		put(t, a, tasks...)
		for _, q := range queries {
			// Counts by labels (and workflow) agree with the list.
			if q.State == 0 && q.CreatedAfter.IsZero() && q.CreatedBefore.IsZero() && q.IDPrefix == "" {
				counts, err := a.CountLabeled(ctxT(t), q.Namespace, q.Workflow, q.Labels)
				var n int64
				for _, c := range counts {
					n += c
				}
				if err != nil || n != int64(len(expect(tasks, q))) {
					t.Errorf("%+v: counted %d (%v), want %d", q, n, err, len(expect(tasks, q)))
				}
			}
			for _, limit := range []int{4, 500} {
				q.Limit = limit
				got, want := ids(listAll(t, a, q)), expect(tasks, q)
				if !slices.Equal(got, want) {
					t.Errorf("%+v:\n got %v\nwant %v", q, got, want)
				}
			}
		}
	})
}

// Full=false returns the columns and Summary, not Record.
func TestListFull(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		want := task("default", "t1", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
		put(t, a, want)
		for _, full := range []bool{false, true} {
			page, err := a.List(ctxT(t), archive.Query{Namespace: "default", Limit: 1, Full: full})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) != 1 {
				t.Fatalf("full=%v: %d tasks", full, len(page))
			}
			w := want
			if !full {
				w.Record = nil
			}
			sameTask(t, page[0], w)
			if !full && page[0].Record != nil {
				t.Fatalf("full=false: Record %q, want nil", page[0].Record)
			}
		}
	})
}

func TestCount(t *testing.T) {
	tasks := corpus()
	eachKind(t, func(t *testing.T, a archive.Archive) {
		put(t, a, tasks...)
		for _, wf := range []string{"", "checkout", "check", "none"} {
			want := map[reevev1.TaskState]int64{}
			for _, tk := range tasks {
				if tk.Namespace == "default" && (wf == "" || tk.Workflow == wf) {
					want[tk.State]++
				}
			}
			got, err := a.Count(ctxT(t), "default", wf)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Count(default, %q) = %v, want %v", wf, got, want)
			}
		}
	})
}

func TestHas(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		var tasks []archive.Task
		var asked []string
		for i := range 1200 { // more than one chunk of ids
			id := fmt.Sprintf("t%04d", i)
			asked = append(asked, id)
			if i%3 == 0 {
				tasks = append(tasks, task("default", id, "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base))
			}
		}
		put(t, a, task("other", "t0001", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base))
		put(t, a, tasks...)
		has, err := a.Has(ctxT(t), "default", asked)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range asked {
			if has[id] != (i%3 == 0) {
				t.Fatalf("Has[%s] = %v, want %v", id, has[id], i%3 == 0)
			}
		}
		if has, err := a.Has(ctxT(t), "default", nil); err != nil || len(has) != 0 {
			t.Fatalf("Has of no ids: %v, %v", has, err)
		}
	})
}

// DropEndedBefore a midnight deletes the tasks of the days before it, in
// both implementations, and a task of a dropped day can be put again.
func TestDropEndedBefore(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		today := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
		ended := func(id string, end time.Time) archive.Task {
			tk := task("default", id, "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, end.Add(-time.Minute))
			tk.EndTime = end
			return tk
		}
		old1 := ended("old1", today.Add(-72*time.Hour+time.Hour))
		old2 := ended("old2", today.Add(-48*time.Hour+23*time.Hour))
		old3 := ended("old3", today.Add(-48*time.Hour+2*time.Hour))
		edge := ended("edge", today.Add(-24*time.Hour)) // the first instant of yesterday
		kept := ended("kept", today.Add(12*time.Hour))
		put(t, a, old1, old2, old3, edge, kept)
		n, err := a.DropEndedBefore(ctx, today.Add(-24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Fatalf("DropEndedBefore: %d dropped, want 3", n)
		}
		has, err := a.Has(ctx, "default", []string{"old1", "old2", "old3", "edge", "kept"})
		if err != nil {
			t.Fatal(err)
		}
		if has["old1"] || has["old2"] || has["old3"] || !has["edge"] || !has["kept"] {
			t.Fatalf("after the drop: %v, want only edge and kept", has)
		}
		// Again: nothing left to drop.
		if n, err := a.DropEndedBefore(ctx, today.Add(-24*time.Hour)); err != nil || n != 0 {
			t.Fatalf("second drop: %d, %v", n, err)
		}
		put(t, a, old1)
		if _, err := a.Get(ctx, "default", "old1"); err != nil {
			t.Fatalf("a task of a dropped day put again: %v", err)
		}
	})
}

// Opening an archive twice (a restart) keeps its tasks and migrates
// nothing again.
func TestOpenTwice(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.dsn(t)
			a := open(t, dsn)
			want := task("default", "t1", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
			put(t, a, want)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			b := open(t, dsn)
			got, err := b.Get(ctxT(t), "default", "t1")
			if err != nil {
				t.Fatal(err)
			}
			sameTask(t, got, want)
		})
	}
}

func TestOpenRefusesOtherDSNs(t *testing.T) {
	for _, dsn := range []string{"", "mysql://u:secret@h/db", "/var/lib/archive.db", "sqlite:", "sqlite://", "sqlite:a.db?cache=shared", "host=localhost dbname=x"} {
		_, err := archive.Open(ctxT(t), dsn)
		if err == nil {
			t.Fatalf("Open(%q): no error", dsn)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", dsn, err)
		}
	}
	_, err := archive.Open(ctxT(t), "mysql://u@h/db")
	if err == nil || !strings.Contains(err.Error(), "postgres://") || !strings.Contains(err.Error(), "sqlite:PATH") {
		t.Fatalf("Open(mysql://...) = %v, want an error naming the accepted forms", err)
	}
}

func TestRedact(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://reeve:s3cret@db:5432/reeve?sslmode=verify-full": "postgres://reeve:xxxxx@db:5432/reeve?sslmode=verify-full",
		"postgres://reeve@db/reeve?password=s3cret&sslmode=require": "postgres://reeve@db/reeve?password=xxxxx&sslmode=require",
		"postgresql://db/reeve?sslpassword=s3cret":                  "postgresql://db/reeve?sslpassword=xxxxx",
		"host=db password=s3cret dbname=reeve":                      "host=db password=xxxxx dbname=reeve",
		"postgres://reeve:s%3cret@db/reeve":                         "postgres://reeve:xxxxx@db/reeve",
		"sqlite:/var/lib/reeve/archive.db":                          "sqlite:/var/lib/reeve/archive.db",
		"postgres://reeve@db/reeve":                                 "postgres://reeve@db/reeve",
	} {
		if got := archive.Redact(dsn); got != want {
			t.Errorf("Redact(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// Stats counts the tasks and reports a size that grows with them.
func TestStats(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		empty, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		put(t, a, corpus()...)
		st, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if empty.Tasks != 0 || st.Tasks != 300 || st.Bytes <= empty.Bytes {
			t.Fatalf("Stats: empty %+v, with 300 tasks %+v", empty, st)
		}
	})
}

// Tasks whose end time is far after their create time (long runs) or a
// little before it (the clocks of two machines) are found by create time
// and replaced by a later Put like any other.
func TestEndFarFromCreate(t *testing.T) {
	eachKind(t, func(t *testing.T, a archive.Archive) {
		ctx := ctxT(t)
		long := task("default", "long", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
		long.EndTime = base.Add(40 * 24 * time.Hour)
		skewed := task("default", "skewed", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
		skewed.EndTime = base.Add(-time.Hour)
		put(t, a, long, skewed)
		q := archive.Query{Namespace: "default", CreatedAfter: base, CreatedBefore: base.Add(time.Second), Limit: 10}
		if got := ids(listAll(t, a, q)); !slices.Equal(got, []string{"long", "skewed"}) {
			t.Fatalf("List by create time: %v, want long and skewed", got)
		}
		long.EndTime, skewed.EndTime = base.Add(time.Minute), base.Add(-2*time.Hour)
		put(t, a, long, skewed)
		if st, err := a.Stats(ctx); err != nil || st.Tasks != 2 {
			t.Fatalf("Stats after putting both again: %+v, %v; want 2 tasks", st, err)
		}
	})
}

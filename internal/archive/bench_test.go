package archive_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
)

// The benchmarks run against a table of REEVE_ARCHIVE_BENCH_ROWS tasks
// (default 100,000), filled once per test binary and kind, of the shape a
// deployment with 30 days of retention holds: 70 % in namespace default,
// 20 workflows, 85 % succeeded, created evenly over 30 days, a summary of
// 150 B and a record of 300 B. For example (docs/archive.md):
//
//	REEVE_ARCHIVE_BENCH_ROWS=1000000 go test -run '^$' -bench . -benchtime 2000x ./internal/archive/

const (
	benchDays      = 30
	benchWorkflows = 20
	summaryBytes   = 150
	recordBytes    = 300
)

// benchNow is the end of the benchmark's 30 days.
var benchNow = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

func benchRows(b *testing.B) int {
	n := 100_000
	if s := os.Getenv("REEVE_ARCHIVE_BENCH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("REEVE_ARCHIVE_BENCH_ROWS=%q: want a number of at least 1000", s)
		}
		n = v
	}
	return n
}

// benchTask returns the i-th task of the benchmark's table (the same for
// the same seed and i).
func benchTask(r *rand.Rand, i int) archive.Task {
	ns := "default"
	if x := r.IntN(10); x >= 7 {
		ns = fmt.Sprintf("team-%d", x-6)
	}
	state := reevev1.TaskState_TASK_STATE_SUCCEEDED
	switch x := r.IntN(100); {
	case x >= 99:
		state = reevev1.TaskState_TASK_STATE_COMPENSATED
	case x >= 95:
		state = reevev1.TaskState_TASK_STATE_CANCELED
	case x >= 85:
		state = reevev1.TaskState_TASK_STATE_FAILED
	}
	created := benchNow.Add(-time.Duration(r.Int64N(int64(benchDays * 24 * time.Hour))))
	summary, record := make([]byte, summaryBytes), make([]byte, recordBytes)
	for j := range summary {
		summary[j] = byte(r.Uint32())
	}
	for j := range record {
		record[j] = byte(r.Uint32())
	}
	return archive.Task{
		Namespace:  ns,
		ID:         fmt.Sprintf("task-%016x-%d", r.Uint64(), i),
		Workflow:   fmt.Sprintf("workflow-%02d", r.IntN(benchWorkflows)),
		State:      state,
		CreateTime: created,
		EndTime:    created.Add(time.Duration(r.Int64N(int64(10 * time.Minute)))),
		Summary:    summary,
		Record:     record,
	}
}

// fixture is a filled archive shared by the benchmarks of one kind.
type fixture struct {
	a   archive.Archive
	dsn string
	ids [][2]string // a sample of (namespace, id) to Get
}

var (
	fixturesMu sync.Mutex
	fixtures   = map[string]*fixture{}
	// fixtureDirs are removed when the test binary ends (TestMain).
	fixtureDirs []string
)

// closeFixtures closes the benchmarks' archives and removes their files.
func closeFixtures() {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	for _, f := range fixtures {
		f.a.Close()
	}
	for _, d := range fixtureDirs {
		os.RemoveAll(d)
	}
}

// benchKinds runs f as a sub-benchmark per implementation, each on its
// filled fixture.
func benchKinds(b *testing.B, f func(b *testing.B, fx *fixture)) {
	for _, kind := range []string{"postgres", "sqlite"} {
		b.Run(kind, func(b *testing.B) { f(b, filled(b, kind)) })
	}
}

func filled(b *testing.B, kind string) *fixture {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	if fx := fixtures[kind]; fx != nil {
		return fx
	}
	ctx := context.Background()
	n := benchRows(b)
	var dsn string
	switch kind {
	case "postgres":
		var err error
		if dsn, err = pgtest.Shared(b).CreateDatabase(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	case "sqlite":
		dir, err := os.MkdirTemp("", "reeve-archive-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fixtureDirs = append(fixtureDirs, dir)
		dsn = "sqlite:" + filepath.Join(dir, "archive.db")
	}
	a, err := archive.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	fx := &fixture{a: a, dsn: dsn}
	start := time.Now()
	r := rand.New(rand.NewPCG(1, 2))
	tasks := make([]archive.Task, 0, 5000)
	flush := func() {
		if kind == "postgres" {
			copyTasks(b, dsn, a, tasks)
		} else if err := a.Put(ctx, tasks); err != nil {
			b.Fatal(err)
		}
		tasks = tasks[:0]
	}
	for i := range n {
		t := benchTask(r, i)
		if i%max(1, n/10000) == 0 {
			fx.ids = append(fx.ids, [2]string{t.Namespace, t.ID})
		}
		tasks = append(tasks, t)
		if len(tasks) == cap(tasks) {
			flush()
		}
	}
	flush()
	if kind == "postgres" {
		pgExec(b, dsn, "ANALYZE archived_tasks")
	}
	st, err := a.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: filled %d tasks in %v: %d bytes, %d bytes per task", kind, st.Tasks, time.Since(start).Round(time.Millisecond), st.Bytes, st.Bytes/max(1, st.Tasks))
	fixtures[kind] = fx
	return fx
}

// copyTasks writes tasks with COPY (pgx CopyFrom), after a Put of one task
// of each day creates the days' partitions.
func copyTasks(b *testing.B, dsn string, a archive.Archive, tasks []archive.Task) {
	ctx := context.Background()
	firsts := map[int64]archive.Task{}
	var rest []archive.Task
	for _, t := range tasks {
		d := t.EndTime.Unix() / 86400
		if _, ok := firsts[d]; !ok {
			firsts[d] = t
			continue
		}
		rest = append(rest, t)
	}
	var seed []archive.Task
	for _, t := range firsts {
		seed = append(seed, t)
	}
	if err := a.Put(ctx, seed); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"archived_tasks"},
		[]string{"namespace", "id", "workflow", "state", "created_ns", "ended_ns", "summary", "record"},
		pgx.CopyFromSlice(len(rest), func(i int) ([]any, error) {
			t := rest[i]
			return []any{t.Namespace, t.ID, t.Workflow, int16(t.State), t.CreateTime.UnixNano(), t.EndTime.UnixNano(), t.Summary, t.Record}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
}

func pgExec(b *testing.B, dsn, sql string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		b.Fatal(err)
	}
}

// latencies records each operation's duration; report adds p50 and p99 to
// the benchmark's results.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkGet reads one task (Record and Summary) by namespace and id.
func BenchmarkGet(b *testing.B) {
	benchKinds(b, func(b *testing.B, fx *fixture) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(4, 5))
		lat := make(latencies, 0, b.N)
		for b.Loop() {
			k := fx.ids[r.IntN(len(fx.ids))]
			start := time.Now()
			if _, err := fx.a.Get(ctx, k[0], k[1]); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		lat.report(b)
	})
}

// BenchmarkListFiltered reads a page of 100 summaries of namespace default,
// one workflow, one state and a day's time range (the console's filters),
// then the next page.
func BenchmarkListFiltered(b *testing.B) {
	states := []reevev1.TaskState{reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED}
	benchKinds(b, func(b *testing.B, fx *fixture) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(6, 7))
		lat := make(latencies, 0, b.N)
		var got int
		for b.Loop() {
			from := benchNow.Add(-time.Duration(r.IntN(benchDays)+1) * 24 * time.Hour)
			q := archive.Query{
				Namespace: "default", Workflow: fmt.Sprintf("workflow-%02d", r.IntN(benchWorkflows)), State: states[r.IntN(len(states))],
				CreatedAfter: from, CreatedBefore: from.Add(24 * time.Hour), Limit: 100,
			}
			start := time.Now()
			page, err := fx.a.List(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			if len(page) == q.Limit {
				last := page[len(page)-1]
				q.After = &archive.Position{Created: last.CreateTime, ID: last.ID}
				if _, err := fx.a.List(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			lat = append(lat, time.Since(start))
			got += len(page)
		}
		b.ReportMetric(float64(got)/float64(len(lat)), "tasks/page")
		lat.report(b)
	})
}

// BenchmarkPut writes batches of 500 new tasks (one op: one batch) into the
// filled table. Last in the file: the benchmarks run in order, and the
// reads measure the table as filled.
func BenchmarkPut(b *testing.B) {
	benchKinds(b, func(b *testing.B, fx *fixture) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
		batch := make([]archive.Task, 500)
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			for j := range batch {
				batch[j] = benchTask(r, -1-i*500-j)
				// Tasks that ended in the last hour, a few minutes after
				// they were created.
				batch[j].EndTime = benchNow.Add(-time.Duration(r.Int64N(int64(time.Hour))))
				batch[j].CreateTime = batch[j].EndTime.Add(-time.Duration(r.Int64N(int64(5 * time.Minute))))
			}
			b.StartTimer()
			start := time.Now()
			if err := fx.a.Put(ctx, batch); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.ReportMetric(float64(len(lat)*len(batch))/b.Elapsed().Seconds(), "tasks/s")
		lat.report(b)
	})
}

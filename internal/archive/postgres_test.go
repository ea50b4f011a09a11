package archive_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
)

// pgQuery connects to dsn and collects the first column of a query.
func pgQuery[T any](t *testing.T, dsn, sql string, args ...any) []T {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func partitions(t *testing.T, dsn string) []string {
	return pgQuery[string](t, dsn, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'archived_tasks'::regclass ORDER BY 1`)
}

// From an empty database Open creates the table, its indexes and the
// schema version; several Opens at once migrate once.
func TestPostgresMigrationsFromEmpty(t *testing.T) {
	dsn := pgtest.Start(t)
	const opens = 6
	var wg sync.WaitGroup
	errs := make(chan error, opens)
	for range opens {
		wg.Go(func() {
			a, err := archive.Open(ctxT(t), dsn)
			if err == nil {
				err = a.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v := pgQuery[string](t, dsn, "SELECT name FROM archive_schema_version ORDER BY version"); !slices.Equal(v, []string{"0001_archived_tasks.sql", "0002_labels.sql"}) {
		t.Fatalf("archive_schema_version: %v, want each migration once", v)
	}
	idx := pgQuery[string](t, dsn, "SELECT indexname::text FROM pg_indexes WHERE tablename = 'archived_tasks' ORDER BY 1")
	want := []string{"archived_tasks_ns_created", "archived_tasks_ns_state_created", "archived_tasks_ns_wf_created", "archived_tasks_ns_wf_state_created", "archived_tasks_pkey"}
	if !slices.Equal(idx, want) {
		t.Fatalf("indexes %v, want %v", idx, want)
	}
	if p := partitions(t, dsn); len(p) != 0 {
		t.Fatalf("partitions of an empty archive: %v", p)
	}
}

// A database of a newer schema than the binary knows is refused.
func TestPostgresRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.Start(t)
	open(t, dsn).Close()
	pgQuery[int32](t, dsn, "INSERT INTO archive_schema_version (version, name) VALUES (99, 'future') RETURNING version")
	if _, err := archive.Open(ctxT(t), dsn); err == nil {
		t.Fatal("Open of a schema version 99: no error")
	}
}

// Put creates the partitions of the tasks' end days; DropEndedBefore drops
// the partitions that end at or before t and keeps t's own day whole
// (retention rounded to days).
func TestPostgresPartitions(t *testing.T) {
	dsn := pgtest.Start(t)
	a := open(t, dsn)
	ctx := ctxT(t)
	today := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var tasks []archive.Task
	for i, end := range []time.Time{today.Add(-47 * time.Hour), today.Add(-23 * time.Hour), today.Add(time.Hour), today.Add(23 * time.Hour)} {
		tk := task("default", string(rune('a'+i)), "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, end.Add(-time.Minute))
		tk.EndTime = end
		tasks = append(tasks, tk)
	}
	put(t, a, tasks...)
	want := []string{"archived_tasks_20261125", "archived_tasks_20261126", "archived_tasks_20261127"}
	if got := partitions(t, dsn); !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	// Noon today: the tasks of today that ended before noon stay.
	n, err := a.DropEndedBefore(ctx, today.Add(12*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("dropped %d, want 2", n)
	}
	if got := partitions(t, dsn); !slices.Equal(got, want[2:]) {
		t.Fatalf("partitions after the drop %v, want %v", got, want[2:])
	}
	if has, _ := a.Has(ctx, "default", []string{"c", "d"}); !has["c"] || !has["d"] {
		t.Fatalf("today's tasks after the drop: %v", has)
	}
}

// A partition dropped by another scheduler (another Open: its cache still
// believes in the partition) is created again by the next Put.
func TestPostgresPutAfterAnotherDropped(t *testing.T) {
	dsn := pgtest.Start(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := ctxT(t)
	old := task("default", "old", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
	put(t, b, old)
	if n, err := a.DropEndedBefore(ctx, base.Add(72*time.Hour)); err != nil || n != 1 {
		t.Fatalf("drop: %d, %v", n, err)
	}
	old.ID = "old-again"
	put(t, b, old)
	if _, err := b.Get(ctx, "default", "old-again"); err != nil {
		t.Fatal(err)
	}
}

// The archive goes down: Put fails within its context; it comes back: Put
// works again without reopening (the pool reconnects).
func TestPostgresOutage(t *testing.T) {
	srv := pgtest.StartServer(t)
	a := open(t, srv.DSN("postgres"))
	put(t, a, task("default", "before", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base))

	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := a.Put(ctx, []archive.Task{task("default", "during", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)})
	if err == nil {
		t.Fatal("Put with the server down: no error")
	}
	// Bounded by its context (5 s), with room for a loaded machine.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("Put with the server down returned after %v", d)
	}
	if err := a.Ping(ctx); err == nil {
		t.Fatal("Ping with the server down: no error")
	}

	srv.Start(t)
	put(t, a, task("default", "after", "wf", reevev1.TaskState_TASK_STATE_SUCCEEDED, base))
	has, err := a.Has(ctxT(t), "default", []string{"before", "during", "after"})
	if err != nil {
		t.Fatal(err)
	}
	if !has["before"] || has["during"] || !has["after"] {
		t.Fatalf("after the outage: %v, want before and after", has)
	}
}

// Open of a server that does not answer fails within its context, and
// the error does not show the password.
func TestPostgresOpenUnreachable(t *testing.T) {
	srv := pgtest.StartServer(t)
	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dsn := "postgres://reeve:s3cret@127.0.0.1:" + itoa(srv.Port()) + "/postgres?sslmode=disable"
	_, err := archive.Open(ctx, dsn)
	if err == nil {
		t.Fatal("Open of a stopped server: no error")
	}
	if contains(err.Error(), "s3cret") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

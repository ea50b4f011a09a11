package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Advisory lock keys. Migrations take the one-key (bigint) lock
// migrateLock; Put takes two-key (int4, int4) locks (putLockClass,
// hash of namespace/id), and partition creation (partitionLockClass, day):
// the two forms never collide.
const (
	migrateLock        int64 = 0x7265657665617263 // "reevearc"
	putLockClass       int32 = 0x72766101
	partitionLockClass int32 = 0x72766102
)

const day = int64(24 * time.Hour)

// postgres is the Archive in PostgreSQL: a table partitioned by UTC day of
// the end time (migrations/postgres).
type postgres struct {
	pool *pgxpool.Pool

	mu         sync.Mutex
	partitions map[int64]bool // days whose partition exists (as far as we know)
}

func openPostgres(ctx context.Context, dsn string) (*postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's errors may quote the DSN: say which without it.
		return nil, fmt.Errorf("archive: parse PostgreSQL DSN %s: %s", Redact(dsn), strings.ReplaceAll(err.Error(), dsn, Redact(dsn)))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "reeve"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("archive: PostgreSQL %s: %w", Redact(dsn), err)
	}
	p := &postgres{pool: pool, partitions: map[int64]bool{}}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("archive: PostgreSQL %s: %w", Redact(dsn), err)
	}
	return p, nil
}

// migrate applies the pending migrations in one transaction, under an
// advisory lock: schedulers opening the archive at once migrate it once.
func (p *postgres) migrate(ctx context.Context) error {
	ms, err := migrations("postgres")
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return fmt.Errorf("lock for migrations: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS archive_schema_version (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create archive_schema_version: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM archive_schema_version").Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		todo, err := pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range todo {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO archive_schema_version (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// dayOf returns the UTC day (days since 1970-01-01) of a time in ns.
func dayOf(ns int64) int64 {
	d := ns / day
	if ns < 0 && ns%day != 0 {
		d--
	}
	return d
}

// partitionName is the partition of a day: archived_tasks_YYYYMMDD.
func partitionName(d int64) string {
	return "archived_tasks_" + time.Unix(d*day/int64(time.Second), 0).UTC().Format("20060102")
}

// partitionDay parses a partition's name back to its day.
func partitionDay(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "archived_tasks_")
	if !ok || len(s) != 8 {
		return 0, false
	}
	t, err := time.Parse("20060102", s)
	if err != nil {
		return 0, false
	}
	return dayOf(t.UnixNano()), true
}

// ensurePartitions creates the partitions of the days of tasks' end times
// that are not known to exist (CREATE TABLE IF NOT EXISTS under an advisory
// lock per day, so that schedulers creating the same day at once do not
// fail).
func (p *postgres) ensurePartitions(ctx context.Context, tasks []Task) error {
	missing := map[int64]bool{}
	p.mu.Lock()
	for _, t := range tasks {
		if d := dayOf(toNS(t.EndTime)); !p.partitions[d] {
			missing[d] = true
		}
	}
	p.mu.Unlock()
	for d := range missing {
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", partitionLockClass, int32(d)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF archived_tasks FOR VALUES FROM (%d) TO (%d)",
				partitionName(d), d*day, (d+1)*day))
			return err
		})
		if err != nil {
			return fmt.Errorf("archive: create partition %s: %w", partitionName(d), err)
		}
		p.mu.Lock()
		p.partitions[d] = true
		p.mu.Unlock()
	}
	return nil
}

func (p *postgres) forgetPartitions() {
	p.mu.Lock()
	p.partitions = map[int64]bool{}
	p.mu.Unlock()
}

// isNoPartition reports PostgreSQL's "no partition of relation found for
// row": a partition we believed in was dropped (by another scheduler's
// DropEndedBefore).
func isNoPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition")
}

const (
	// Put's locks: one per task, in a fixed order (no deadlock between two
	// Puts), held to the commit. Two Puts of one task with different end
	// times would otherwise each delete the other's (not yet visible) row
	// and leave two.
	putLockSQL = `SELECT pg_advisory_xact_lock($1, k) FROM (
		SELECT DISTINCT hashtext(n || '/' || i) AS k FROM unnest($2::text[], $3::text[]) AS u(n, i) ORDER BY k OFFSET 0) s`
	// The delete looks each task up in the partitions of the days from its
	// create time (less endSlack, for clocks apart) on: a task's create time
	// never changes and it ends after it was created, so an older row of
	// it is there. Joins other than a nested loop are off for the
	// transaction: the lookups must be index probes of the few partitions
	// left after run-time pruning, never scans of every partition (a hash
	// join the planner may choose for a batch of 500 rows).
	putNoHashSQL  = `SET LOCAL enable_hashjoin = off`
	putNoMergeSQL = `SET LOCAL enable_mergejoin = off`
	putDeleteSQL  = `DELETE FROM archived_tasks t USING unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS u(n, i, e, c)
		WHERE t.namespace = u.n AND t.id = u.i AND t.ended_ns >= u.c - $5 AND t.ended_ns <> u.e`
	putUpsertSQL = `INSERT INTO archived_tasks (namespace, id, workflow, state, created_ns, ended_ns, summary, record, labels)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::bigint[], $6::bigint[], $7::bytea[], $8::bytea[], $9::text[])
		ON CONFLICT (namespace, id, ended_ns) DO UPDATE SET workflow = excluded.workflow, state = excluded.state,
			created_ns = excluded.created_ns, summary = excluded.summary, record = excluded.record, labels = excluded.labels`
)

func (p *postgres) Put(ctx context.Context, tasks []Task) error {
	tasks = dedupe(tasks)
	if len(tasks) == 0 {
		return nil
	}
	if err := p.ensurePartitions(ctx, tasks); err != nil {
		return err
	}
	err := p.put(ctx, tasks)
	if isNoPartition(err) {
		p.forgetPartitions()
		if err = p.ensurePartitions(ctx, tasks); err != nil {
			return err
		}
		err = p.put(ctx, tasks)
	}
	if err != nil {
		return fmt.Errorf("archive: put %d tasks: %w", len(tasks), err)
	}
	return nil
}

// put writes tasks in one transaction: a batch (the plan settings, the
// locks, the delete of the same tasks with other end times, the upsert),
// one round trip between BEGIN and COMMIT.
func (p *postgres) put(ctx context.Context, tasks []Task) error {
	n := len(tasks)
	var (
		ns, ids, wfs    = make([]string, n), make([]string, n), make([]string, n)
		states          = make([]int16, n)
		created, ended  = make([]int64, n), make([]int64, n)
		summary, record = make([][]byte, n), make([][]byte, n)
		labels          = make([]string, n)
	)
	for i, t := range tasks {
		ns[i], ids[i], wfs[i] = t.Namespace, t.ID, t.Workflow
		states[i] = int16(t.State)
		created[i], ended[i] = toNS(t.CreateTime), toNS(t.EndTime)
		summary[i], record[i] = nonNil(t.Summary), nonNil(t.Record)
		labels[i] = labelsText(t.Labels)
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(putNoHashSQL)
		b.Queue(putNoMergeSQL)
		b.Queue(putLockSQL, putLockClass, ns, ids)
		b.Queue(putDeleteSQL, ns, ids, ended, created, endSlack)
		b.Queue(putUpsertSQL, ns, ids, wfs, states, created, ended, summary, record, labels)
		res := tx.SendBatch(ctx, b)
		for range b.Len() {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return err
			}
		}
		return res.Close()
	})
}

func (p *postgres) Get(ctx context.Context, ns, id string) (Task, error) {
	row := p.pool.QueryRow(ctx, "SELECT "+listColumns+", record FROM archived_tasks WHERE namespace = $1 AND id = $2 ORDER BY ended_ns DESC LIMIT 1", ns, id)
	t, err := scanTask(row, true)
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	if err != nil {
		return Task{}, fmt.Errorf("archive: get %s/%s: %w", ns, id, err)
	}
	return t, nil
}

func pgPlaceholder(n int) string { return fmt.Sprintf("$%d", n) }

// pgPrefix matches ids by LIKE 'p%' with p's metacharacters escaped: with
// the C collation PostgreSQL turns it into an index range itself.
func pgPrefix(l *listSQL, p string) {
	l.cond(`id LIKE ` + l.arg(likeEscape(p)+"%") + ` ESCAPE '\'`)
}

// pgContains is the condition that column col holds the text of ph.
func pgContains(col, ph string) string { return "strpos(" + col + ", " + ph + ") > 0" }

func (p *postgres) List(ctx context.Context, q Query) ([]Task, error) {
	sql, args, err := buildList(q, dialect{ph: pgPlaceholder, idPrefix: pgPrefix, endBound: true,
		contains: pgContains})
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: list: %w", err)
	}
	defer rows.Close()
	return collectTasks(rows, q.Full, q.Limit)
}

func (p *postgres) Count(ctx context.Context, ns, wf string) (map[reevev1.TaskState]int64, error) {
	return p.CountLabeled(ctx, ns, wf, nil)
}

func (p *postgres) CountLabeled(ctx context.Context, ns, wf string, labels map[string]string) (map[reevev1.TaskState]int64, error) {
	sql, args := countSQL(ns, wf, labels, pgPlaceholder, pgContains)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: count: %w", err)
	}
	counts := map[reevev1.TaskState]int64{}
	var (
		state int16
		n     int64
	)
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		counts[stateOf(state)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive: count: %w", err)
	}
	return counts, nil
}

func (p *postgres) Has(ctx context.Context, ns string, ids []string) (map[string]bool, error) {
	has := map[string]bool{}
	if len(ids) == 0 {
		return has, nil
	}
	rows, err := p.pool.Query(ctx, "SELECT DISTINCT id FROM archived_tasks WHERE namespace = $1 AND id = ANY($2)", ns, ids)
	if err != nil {
		return nil, fmt.Errorf("archive: has: %w", err)
	}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		has[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive: has: %w", err)
	}
	return has, nil
}

// DropEndedBefore drops the partitions whose day ends at or before t: the
// tasks of t's own day are kept, so retention is rounded to whole days
// (up). The count is taken just before each drop.
func (p *postgres) DropEndedBefore(ctx context.Context, t time.Time) (int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'archived_tasks'::regclass ORDER BY c.relname`)
	if err != nil {
		return 0, fmt.Errorf("archive: drop: list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("archive: drop: list partitions: %w", err)
	}
	limit := toNS(t)
	var dropped int64
	for _, name := range names {
		d, ok := partitionDay(name)
		if !ok || (d+1)*day > limit {
			continue
		}
		var n int64
		if err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()).Scan(&n); err != nil {
			return dropped, fmt.Errorf("archive: drop %s: %w", name, err)
		}
		// Detach first: it locks the parent, then the partition, in the
		// order Put does (dropping the partition first could deadlock).
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "ALTER TABLE archived_tasks DETACH PARTITION "+pgx.Identifier{name}.Sanitize()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DROP TABLE "+pgx.Identifier{name}.Sanitize())
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("archive: drop %s: %w", name, err)
		}
		p.mu.Lock()
		delete(p.partitions, d)
		p.mu.Unlock()
		dropped += n
	}
	return dropped, nil
}

func (p *postgres) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := p.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM archived_tasks),
		(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'archived_tasks'::regclass)`).
		Scan(&s.Tasks, &s.Bytes)
	if err != nil {
		return Stats{}, fmt.Errorf("archive: stats: %w", err)
	}
	return s, nil
}

func (p *postgres) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("archive: ping: %w", err)
	}
	return nil
}

func (p *postgres) Close() error {
	p.pool.Close()
	return nil
}

package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go driver "sqlite"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// SQLite settings: WAL (readers do not block the writer), a wait of
// busyTimeout for a lock held by another connection or process,
// synchronous=FULL (a committed Put survives a power loss: the scheduler
// deletes the task from etcd after it), and readConns connections for
// reads beside the one writer.
const (
	busyTimeout  = 10 * time.Second
	readConns    = 4
	dropBatch    = 1000 // rows deleted per transaction by DropEndedBefore
	sqliteParams = "?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
)

// sqlite is the Archive in an SQLite file: one plain table
// (migrations/sqlite), one writer connection (writes are serialized) and a
// small pool of readers.
type sqlite struct {
	w *sql.DB // one connection: every write
	r *sql.DB // reads
}

func openSQLite(ctx context.Context, path string) (*sqlite, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("archive: SQLite path %q: ? and # are not allowed (no parameters: the archive sets its own)", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("archive: SQLite %s: %w", path, err)
	}
	params := fmt.Sprintf(sqliteParams, busyTimeout.Milliseconds())
	w, err := sql.Open("sqlite", path+params+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("archive: SQLite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &sqlite{w: w}
	// The writer first: it creates the file and sets WAL mode.
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("archive: SQLite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+params+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("archive: SQLite %s: %w", path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s.r = r
	return s, nil
}

// migrate applies the pending migrations in one (immediate: write-locked)
// transaction.
func (s *sqlite) migrate(ctx context.Context) error {
	ms, err := migrations("sqlite")
	if err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS archive_schema_version (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`); err != nil {
			return fmt.Errorf("create archive_schema_version: %w", err)
		}
		var current int
		if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM archive_schema_version").Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		todo, err := pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range todo {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO archive_schema_version (version, name) VALUES (?, ?)", m.version, m.name); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// writeTx runs f in a transaction of the writer, committed when f returns
// nil.
func (s *sqlite) writeTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

const sqliteUpsertSQL = `INSERT INTO archived_tasks (namespace, id, workflow, state, created_ns, ended_ns, summary, record, labels)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (namespace, id) DO UPDATE SET workflow = excluded.workflow, state = excluded.state,
		created_ns = excluded.created_ns, ended_ns = excluded.ended_ns, summary = excluded.summary, record = excluded.record, labels = excluded.labels`

func (s *sqlite) Put(ctx context.Context, tasks []Task) error {
	if len(tasks) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, sqliteUpsertSQL)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, t := range tasks {
			if _, err := st.ExecContext(ctx, t.Namespace, t.ID, t.Workflow, int16(t.State),
				toNS(t.CreateTime), toNS(t.EndTime), nonNil(t.Summary), nonNil(t.Record), labelsText(t.Labels)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive: put %d tasks: %w", len(tasks), err)
	}
	return nil
}

func (s *sqlite) Get(ctx context.Context, ns, id string) (Task, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+listColumns+", record FROM archived_tasks WHERE namespace = ? AND id = ?", ns, id)
	t, err := scanTask(row, true)
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	if err != nil {
		return Task{}, fmt.Errorf("archive: get %s/%s: %w", ns, id, err)
	}
	return t, nil
}

// sqlitePlaceholder numbers the arguments (?1, ?2...): one may be used twice.
func sqlitePlaceholder(n int) string { return fmt.Sprintf("?%d", n) }

// sqlitePrefix matches ids by a range of byte strings (SQLite compares
// text with memcmp): id >= p AND id < p's successor.
func sqlitePrefix(l *listSQL, p string) {
	l.cond("id >= " + l.arg(p))
	if end, ok := prefixEnd(p); ok {
		l.cond("id < " + l.arg(end))
	}
}

// sqliteContains is the condition that column col holds the text of ph.
func sqliteContains(col, ph string) string { return "instr(" + col + ", " + ph + ") > 0" }

func (s *sqlite) List(ctx context.Context, q Query) ([]Task, error) {
	query, args, err := buildList(q, dialect{ph: sqlitePlaceholder, idPrefix: sqlitePrefix,
		contains: sqliteContains})
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: list: %w", err)
	}
	defer rows.Close()
	return collectTasks(rows, q.Full, q.Limit)
}

func (s *sqlite) Count(ctx context.Context, ns, wf string) (map[reevev1.TaskState]int64, error) {
	return s.CountLabeled(ctx, ns, wf, nil)
}

func (s *sqlite) CountLabeled(ctx context.Context, ns, wf string, labels map[string]string) (map[reevev1.TaskState]int64, error) {
	query, args := countSQL(ns, wf, labels, sqlitePlaceholder, sqliteContains)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: count: %w", err)
	}
	defer rows.Close()
	counts := map[reevev1.TaskState]int64{}
	for rows.Next() {
		var (
			state int16
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("archive: count: %w", err)
		}
		counts[stateOf(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: count: %w", err)
	}
	return counts, nil
}

// hasChunk bounds the ids of one Has query (SQLite's variables).
const hasChunk = 500

func (s *sqlite) Has(ctx context.Context, ns string, ids []string) (map[string]bool, error) {
	has := map[string]bool{}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), hasChunk)]
		ids = ids[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, ns)
		for _, id := range chunk {
			args = append(args, id)
		}
		query := "SELECT id FROM archived_tasks WHERE namespace = ? AND id IN (?" + strings.Repeat(", ?", len(chunk)-1) + ")"
		rows, err := s.r.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, fmt.Errorf("archive: has: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("archive: has: %w", err)
			}
			has[id] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("archive: has: %w", err)
		}
	}
	return has, nil
}

// DropEndedBefore deletes the tasks that ended before t, dropBatch rows per
// transaction (by the ended_ns index), so that Puts are not held up long.
func (s *sqlite) DropEndedBefore(ctx context.Context, t time.Time) (int64, error) {
	limit := toNS(t)
	var dropped int64
	for {
		var n int64
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM archived_tasks WHERE rowid IN (
				SELECT rowid FROM archived_tasks WHERE ended_ns < ? LIMIT ?)`, limit, dropBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("archive: drop: %w", err)
		}
		dropped += n
		if n < dropBatch {
			return dropped, nil
		}
	}
}

func (s *sqlite) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM archived_tasks),
		(SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size())`).
		Scan(&st.Tasks, &st.Bytes)
	if err != nil {
		return Stats{}, fmt.Errorf("archive: stats: %w", err)
	}
	return st, nil
}

func (s *sqlite) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("archive: ping: %w", err)
	}
	return nil
}

func (s *sqlite) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

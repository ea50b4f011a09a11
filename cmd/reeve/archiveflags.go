package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/scheduler"
)

// archiveFlags configure the archive of finished tasks (docs/archive.md).
type archiveFlags struct {
	dsn         string
	grace       time.Duration
	retention   time.Duration
	dedupWindow time.Duration // a scheduler's (registerServer)
}

// archiveOff is the --archive-dsn that turns the archive off.
const archiveOff = "none"

// register adds the flags; def is the DSN when neither the flag nor
// REEVE_ARCHIVE_DSN is given ("" for none).
func (f *archiveFlags) register(cmd *cobra.Command, getenv func(string) string, def string) {
	if v := getenv("REEVE_ARCHIVE_DSN"); v != "" {
		def = v
	}
	cmd.Flags().StringVar(&f.dsn, "archive-dsn", def,
		"where finished tasks are kept after they leave etcd (env REEVE_ARCHIVE_DSN): postgres://user@host/db?sslmode=verify-full (shared by every scheduler), sqlite:PATH (one scheduler), or "+archiveOff+": terminal tasks are deleted after --retention")
	cmd.Flags().DurationVar(&f.grace, "archive-grace", time.Minute,
		"with an archive: how long a task that ended stays in etcd before it moves to the archive (FAILED tasks stay for --retention, the window to retry or compensate them)")
	cmd.Flags().DurationVar(&f.retention, "archive-retention", 30*24*time.Hour,
		"how long the archive keeps a task after it ended (PostgreSQL: rounded up to whole days); 0 keeps them forever")
}

// registerServer adds the flags of a scheduler's archive: register's and
// --archive-dedup-window.
func (f *archiveFlags) registerServer(cmd *cobra.Command, getenv func(string) string, def string) {
	f.register(cmd, getenv, def)
	cmd.Flags().DurationVar(&f.dedupWindow, "archive-dedup-window", scheduler.DefaultArchiveDedupWindow,
		"with an archive: how long after a task moved there a resubmission of its id is still recognized while the archive is unavailable (a new chosen id is then accepted, one that moved within the window refused as UNAVAILABLE); 0: every submission with a chosen id waits for the archive. Costs 8 bytes per task moved within the window in etcd and in each scheduler's memory; the same on every scheduler")
}

// open opens the archive the flags name. With none it returns no options
// and a close that does nothing.
func (f *archiveFlags) open(ctx context.Context, log *slog.Logger) (opts []scheduler.Option, closeArchive func(), err error) {
	if f.dsn == "" || f.dsn == archiveOff {
		log.Info("no archive: terminal tasks are deleted after the retention (set --archive-dsn to keep them)")
		return nil, func() {}, nil
	}
	if f.grace < 0 || f.retention < 0 || f.dedupWindow < 0 {
		return nil, nil, usageError{fmt.Errorf("--archive-grace, --archive-retention and --archive-dedup-window must not be negative")}
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := archive.Open(octx, f.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--archive-dsn %s: %w", archive.Redact(f.dsn), err)
	}
	log.Info("archive of finished tasks", "dsn", archive.Redact(f.dsn), "grace", f.grace, "retention", f.retention, "dedup_window", f.dedupWindow)
	return []scheduler.Option{scheduler.WithArchive(a, f.grace), scheduler.WithArchiveRetention(f.retention), scheduler.WithArchiveDedupWindow(f.dedupWindow)},
		func() { _ = a.Close() }, nil
}

// reader returns a reader of st's tasks and of the archive the flags name
// (none for "" or none), and a close of the archive it opened.
func (f *archiveFlags) reader(ctx context.Context, st *store.Store) (tasks *taskread.Reader, closeArchive func(), err error) {
	if f.dsn == "" || f.dsn == archiveOff {
		return taskread.New(st, nil), func() {}, nil
	}
	a, err := archive.Open(ctx, f.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--archive-dsn %s: %w", archive.Redact(f.dsn), err)
	}
	return taskread.New(st, a), func() { _ = a.Close() }, nil
}

// devArchiveDSN is reeve dev's default archive: a SQLite file in its data
// directory.
func devArchiveDSN(dataDir string) string {
	return "sqlite:" + filepath.Join(dataDir, "archive.db")
}

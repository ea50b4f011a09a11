package archive_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/reeve-org/reeve/internal/archive"
)

func itoa(n int) string           { return strconv.Itoa(n) }
func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Open creates the file and its missing directories, and the schema from
// empty; a second Open migrates nothing.
func TestSQLiteCreatesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "archive", "archive.db")
	for _, dsn := range []string{"sqlite:" + path, "sqlite://" + path} {
		a := open(t, dsn)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the archive's file: %v", err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions, mode string
	if err := db.QueryRow("SELECT group_concat(name) FROM archive_schema_version").Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != "0001_archived_tasks.sql,0002_labels.sql" {
		t.Fatalf("archive_schema_version: %q, want each migration once", versions)
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal mode %q, %v; want wal", mode, err)
	}
}

// A file of a newer schema than the binary knows is refused.
func TestSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "archive.db")
	open(t, "sqlite:"+path).Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("INSERT INTO archive_schema_version (version, name) VALUES (99, 'future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Open(ctxT(t), "sqlite:"+path); err == nil {
		t.Fatal("Open of a schema version 99: no error")
	}
}

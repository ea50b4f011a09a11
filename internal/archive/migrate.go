package archive

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// The schema of each database, as numbered SQL files applied in order
// (0001_name.sql, 0002_name.sql...). A file, once released, is never edited:
// a change is a new file. The versions applied are kept in the table
// archive_schema_version.
//
//go:embed migrations
var migrationFiles embed.FS

// migration is one numbered SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the migrations of dialect ("postgres" or "sqlite") in
// order, checking they are numbered 1, 2, 3... without gaps.
func migrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("archive: migration %s/%s is not named NNNN_name.sql", dir, name)
		}
		if v != len(ms)+1 {
			return nil, fmt.Errorf("archive: migration %s/%s: want version %d", dir, name, len(ms)+1)
		}
		b, err := fs.ReadFile(migrationFiles, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	return ms, nil
}

// pending returns the migrations after version current, or an error when
// the database is of a newer schema than this binary knows.
func pending(ms []migration, current int) ([]migration, error) {
	if current > len(ms) {
		return nil, fmt.Errorf("archive: the database's schema is version %d, newer than this binary's %d: upgrade reeve", current, len(ms))
	}
	return ms[current:], nil
}

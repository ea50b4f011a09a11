package archive

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Open opens the archive a DSN names, creating its schema or migrating it
// to this binary's version (see docs/archive.md). Accepted forms:
//
//   - postgres://… or postgresql://… — PostgreSQL, any URL that pgx and
//     libpq accept: postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=ca.pem&sslcert=client.pem&sslkey=client.key
//     (several hosts, connect_timeout, application_name, pool_max_conns...
//     as query parameters). Defaults: sslmode=prefer (libpq's),
//     application_name=reeve, connect_timeout 10 s.
//   - sqlite:PATH or sqlite://PATH — an SQLite file, created with its
//     directory when missing (sqlite:/var/lib/reeve/archive.db,
//     sqlite:archive.db relative to the working directory,
//     sqlite:///var/lib/reeve/archive.db). One process at a time.
//
// Open returns once the schema is up to date; ctx bounds the connection
// and the migrations.
func Open(ctx context.Context, dsn string) (Archive, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return nil, fmt.Errorf("archive: DSN %q names no file: want sqlite:PATH", dsn)
		}
		return openSQLite(ctx, path)
	default:
		return nil, fmt.Errorf("archive: DSN %q: want postgres://…, postgresql://… (PostgreSQL) or sqlite:PATH (an SQLite file)", Redact(dsn))
	}
}

// passwordParam matches a password in a DSN's query or in libpq's
// key=value form.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&\s])(?:ssl)?password=)('(?:[^'\\]|\\.)*'|[^&\s]*)`)

// Redact returns dsn with its passwords (the URL's and any password= or
// sslpassword= parameter) replaced by xxxxx, for logs and errors.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			dsn = u.String()
		}
	} else if err != nil && strings.Contains(dsn, "://") {
		// Not a URL we can parse: hide everything between :// and @.
		if i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@"); j > i {
			dsn = dsn[:i+3] + "xxxxx" + dsn[j:]
		}
	}
	return passwordParam.ReplaceAllString(dsn, "${1}xxxxx")
}

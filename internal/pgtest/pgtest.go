// Package pgtest starts throwaway PostgreSQL servers for tests
// (internal/pgserver: initdb and pg_ctl in a temporary directory on a free
// 127.0.0.1 port, trust authentication for the user "reeve"), stopped when
// the test (or the test binary) ends.
//
// Two ways to use it:
//
//	// One server for the whole package, a fresh database per test (fast):
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//	func TestX(t *testing.T) { dsn := pgtest.Start(t); ... }
//
//	// A server of the test's own, to stop and start (outage tests):
//	srv := pgtest.StartServer(t)
//	srv.Stop(t); srv.Start(t)
//
//	// A server that accepts TLS connections only (production's mode):
//	certs := pgtest.IssueCerts(t)
//	srv := pgtest.StartServerTLS(t, certs.TLS(true)) // client certificate auth
//	dsn := srv.DSN("postgres") + "&sslcert=" + url.QueryEscape(certs.ClientCert) + "&sslkey=" + url.QueryEscape(certs.ClientKey)
//
// Without Run in TestMain, Start starts a server per test. When PostgreSQL is
// not installed, Start and StartServer skip the test, or fail it when
// REEVE_REQUIRE_BINARIES=1. PostgreSQL refuses to run as root: as root, the
// server runs as the user "postgres" (through runuser).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/pgserver"
)

// User is the superuser of every server, authenticated by trust.
const User = pgserver.User

// Server is one PostgreSQL server in a temporary directory, removed by the
// test's cleanup. DSN, Port, CreateDatabase and DropDatabase are
// pgserver's.
type Server struct{ *pgserver.Server }

// StartServer starts a server of the test's own, stopped and removed by
// t.Cleanup. Its database "postgres" is empty: s.DSN("postgres").
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := newServer(t)
	if err := s.Server.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// newServer runs initdb for a server removed by t.Cleanup, skipping the
// test when PostgreSQL is missing (see skipOrFatal).
func newServer(t testing.TB) *Server {
	t.Helper()
	s, err := pgserver.New()
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(s.Close)
	return &Server{s}
}

// Stop stops the server at once (pg_ctl stop -m immediate): connections
// break as in a crash. The data is kept for Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.Server.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Start starts a stopped server again on the same port.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.Server.Start(); err != nil {
		t.Fatal(err)
	}
}

var (
	sharedMu  sync.Mutex
	shared    *pgserver.Server
	sharedErr error
	useShared bool
	dbSeq     atomic.Int64
)

// Run runs the package's tests (m.Run) with one shared server, started by
// the first Start, and stops it afterwards. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
func Run(m *testing.M) int {
	sharedMu.Lock()
	useShared = true
	sharedMu.Unlock()
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Close()
		shared = nil
	}
	return code
}

// Start returns the DSN of an empty database for the test: on the package's
// shared server when TestMain uses Run (the database is dropped by
// t.Cleanup), else on a server of the test's own.
func Start(t testing.TB) string {
	t.Helper()
	sharedMu.Lock()
	perTest := !useShared
	sharedMu.Unlock()
	if perTest {
		return StartServer(t).DSN("postgres")
	}
	s := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	dsn, err := s.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dsn
}

// Shared returns the package's shared server, started by the first call,
// stopped when Run returns (for fixtures that outlive one test, such as a
// benchmark's filled table: create their database with CreateDatabase).
// It fails the test when TestMain does not use Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	if !useShared {
		sharedMu.Unlock()
		t.Fatal("pgtest.Shared: TestMain does not call pgtest.Run")
	}
	if shared == nil && sharedErr == nil {
		shared, sharedErr = pgserver.Launch()
	}
	s, err := shared, sharedErr
	sharedMu.Unlock()
	if err != nil {
		skipOrFatal(t, err)
	}
	return &Server{s}
}

// skipOrFatal skips the test when PostgreSQL (or its user) is missing on
// this machine, unless REEVE_REQUIRE_BINARIES=1, and fails it otherwise.
func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, pgserver.ErrMissing) && os.Getenv("REEVE_REQUIRE_BINARIES") != "1" {
		t.Skipf("pgtest: %v (set REEVE_REQUIRE_BINARIES=1 to fail instead)", err)
	}
	t.Fatal(err)
}

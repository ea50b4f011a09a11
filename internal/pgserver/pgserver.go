// Package pgserver runs throwaway PostgreSQL servers: initdb and pg_ctl in
// a temporary directory on a free 127.0.0.1 port, trust authentication for
// the user "reeve" (or TLS only, see TLS), removed by Close. `reeve bench
// --archive-dsn pg` runs its archive on one (Launch), and the tests' helper
// internal/pgtest starts its servers with it. PostgreSQL refuses to run as
// root: as root, the server runs as the user "postgres" (through runuser).
//
//	srv, err := pgserver.Launch()
//	if err != nil { ... }
//	defer srv.Close()
//	dsn := srv.DSN("postgres")
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is the superuser of every server, authenticated by trust.
const User = "reeve"

// startTimeout bounds how long pg_ctl waits for a server to accept
// connections.
const startTimeout = 60 * time.Second

// Server is one PostgreSQL server in a temporary directory.
type Server struct {
	bin     string // directory of initdb and pg_ctl
	runAs   string // "postgres" when running as root, else ""
	dir     string // 0777 temp directory: data/, the socket and the log
	port    int
	tlsCA   string // the CA of a TLS server's certificate (ConfigureTLS), else ""
	running bool
	mu      sync.Mutex
}

// Launch starts a throwaway server: initdb in a fresh temporary directory,
// a free 127.0.0.1 port, trust authentication for User. Its database
// "postgres" is empty: s.DSN("postgres"). Close stops it and removes its
// directory; nothing else does, so call Close on every path.
func Launch() (*Server, error) {
	s, err := New()
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Start starts the server: on a free port (three tries: one may be taken
// between the pick and the start) the first time, on the same port after
// Stop. On a running server it does nothing.
func (s *Server) Start() error {
	if s.port != 0 {
		return s.startOnPort()
	}
	var err error
	for range 3 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.startOnPort(); err == nil {
			return nil
		}
	}
	s.port = 0
	return err
}

// Stop stops the server at once (pg_ctl stop -m immediate): connections
// break as in a crash. The data is kept for Start.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := s.command(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.dataDir()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

// Close stops the server (pg_ctl stop -m immediate) and removes its
// directory, data included.
func (s *Server) Close() {
	_ = s.Stop()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// DSN returns the URL of database db on the server (postgres:// form):
// sslmode=disable, or for a server configured with ConfigureTLS
// sslmode=verify-full&sslrootcert=<its CA>.
func (s *Server) DSN(db string) string {
	ssl := "sslmode=disable"
	if s.tlsCA != "" {
		ssl = "sslmode=verify-full&sslrootcert=" + url.QueryEscape(s.tlsCA)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?%s", User, s.port, db, ssl)
}

// adminDSN is the package's own way in to database db: the server's Unix
// socket, trusted whatever the TCP lines of pg_hba.conf require.
func (s *Server) adminDSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", s.dir, s.port, User, db)
}

// CreateDatabase creates a database named name and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.adminDSN("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// DropDatabase drops database name, ending its connections.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.adminDSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// Port returns the server's TCP port (kept across Stop and Start).
func (s *Server) Port() int { return s.port }

// ErrMissing is what New's error wraps when PostgreSQL (or, as root, the
// user postgres or runuser) is missing on this machine: a test helper skips
// rather than fails (errors.Is(err, ErrMissing)).
var ErrMissing = errors.New("pgserver: PostgreSQL is missing")

// missingError is something New needs that is not installed; it is
// ErrMissing for errors.Is, with its own message.
type missingError struct{ err error }

func (e missingError) Error() string        { return e.err.Error() }
func (e missingError) Is(target error) bool { return target == ErrMissing }

// BinDir returns the directory of PostgreSQL's server binaries: pg_config
// --bindir when it has initdb, else /usr/lib/postgresql/<newest>/bin.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isExecutable(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	for _, v := range []string{"17", "16", "15", "14", "13"} {
		d := "/usr/lib/postgresql/" + v + "/bin"
		if isExecutable(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL is not installed (no initdb in pg_config --bindir or /usr/lib/postgresql/*/bin; make postgres installs it)")
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// New finds the binaries and the user, and runs initdb in a fresh temporary
// directory; the server is not started (Start). Its errors wrap ErrMissing
// when something is not installed. Close removes the directory.
func New() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, missingError{err}
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, missingError{fmt.Errorf("running as root and there is no user postgres to run PostgreSQL as: %v", err)}
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, missingError{fmt.Errorf("running as root and runuser is missing: %v", err)}
		}
		s.runAs = "postgres"
	}
	// Our own directory, traversable by the postgres user (t.TempDir's
	// parents may not be).
	s.dir, err = os.MkdirTemp(os.TempDir(), "pgserver-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(s.dir, 0o777); err != nil {
		s.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := s.command(ctx, "initdb", "-D", s.dataDir(), "-A", "trust", "-U", User, "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		s.Close()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logFile() string { return filepath.Join(s.dir, "postgres.log") }

// command runs one of PostgreSQL's binaries, as the user postgres when root.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.runAs != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", s.runAs, "--", path}, args...)...)
	}
	return exec.CommandContext(ctx, path, args...)
}

func (s *Server) startOnPort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+10*time.Second)
	defer cancel()
	opts := fmt.Sprintf("-p %d -k %s -h 127.0.0.1 -c max_connections=200", s.port, s.dir)
	out, err := s.command(ctx, "pg_ctl", "start", "-w", "-t", strconv.Itoa(int(startTimeout.Seconds())),
		"-D", s.dataDir(), "-l", s.logFile(), "-o", opts).CombinedOutput()
	if err != nil {
		// pg_ctl may leave a postmaster that came up after its wait.
		_ = s.command(context.Background(), "pg_ctl", "stop", "-m", "immediate", "-D", s.dataDir()).Run()
		return fmt.Errorf("pg_ctl start on port %d: %v\n%s\n%s", s.port, err, out, s.logTail())
	}
	s.running = true
	// pg_ctl -w waited for the server to accept connections; check it
	// accepts ours (bounded).
	deadline := time.Now().Add(startTimeout)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, s.adminDSN("postgres"))
		ccancel()
		if err == nil {
			_ = conn.Close(context.Background())
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d does not accept connections: %v\n%s", s.port, err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logFile())
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "postgres log:\n" + string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package archive_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// roundTrip opens the archive at dsn, puts a task and reads it back.
func roundTrip(t *testing.T, dsn string) {
	t.Helper()
	a := open(t, dsn)
	want := task("default", "over-tls", "checkout", reevev1.TaskState_TASK_STATE_SUCCEEDED, base)
	put(t, a, want)
	got, err := a.Get(ctxT(t), "default", "over-tls")
	if err != nil {
		t.Fatal(err)
	}
	sameTask(t, got, want)
}

// openFails opens the archive at dsn, which must fail (within 20 s) with an
// error that says wantMsg (any error when "") and does not show the
// password; it returns the error.
func openFails(t *testing.T, dsn, wantMsg string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := archive.Open(ctx, dsn)
	if err == nil {
		a.Close()
		t.Fatalf("Open(%s) succeeded", archive.Redact(dsn))
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("Open(%s): %v; want an error that says %q", archive.Redact(dsn), err, wantMsg)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Logf("refused as expected: %v", err)
	return err
}

// with returns dsn with its query parameter key set to value.
func with(t *testing.T, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			q.Del(kv[i])
		} else {
			q.Set(kv[i], kv[i+1])
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// A server that accepts TLS only (production's mode), trust authentication:
// the DSN forms docs/archive.md lists, and what each does.
func TestPostgresTLS(t *testing.T) {
	certs := pgtest.IssueCerts(t)
	srv := pgtest.StartServerTLS(t, certs.TLS(false))
	dsn := srv.DSN("postgres") // sslmode=verify-full&sslrootcert=<CA>

	t.Run("verify-full", func(t *testing.T) {
		roundTrip(t, dsn)
	})
	// By name too: the certificate is for localhost as well.
	t.Run("verify-full-localhost", func(t *testing.T) {
		roundTrip(t, strings.Replace(dsn, "@127.0.0.1:", "@localhost:", 1))
	})
	// Plaintext is refused by the server (pg_hba.conf has no host line),
	// with PostgreSQL's own reason; the DSN's password stays out of the
	// error.
	t.Run("disable-refused", func(t *testing.T) {
		plain := with(t, strings.Replace(dsn, "reeve@", "reeve:s3cret@", 1), "sslmode", "disable", "sslrootcert", "")
		err := openFails(t, plain, "no encryption")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28000" {
			t.Fatalf("error %v: want PostgreSQL's invalid_authorization_specification (28000)", err)
		}
	})
	// A server whose certificate another CA issued is not trusted.
	t.Run("wrong-ca", func(t *testing.T) {
		other := pgtest.IssueCerts(t)
		openFails(t, with(t, dsn, "sslrootcert", other.CA), "certificate signed by unknown authority")
	})
	// verify-full checks the name: a certificate of the right CA for
	// another host is refused (verify-ca would accept it).
	t.Run("wrong-host", func(t *testing.T) {
		if _, err := tlsconfig.Issue(certs.Dir, tlsconfig.CertSpec{Name: "elsewhere", Server: true}, tlsconfig.InitOptions{Hosts: []string{"db.example"}}); err != nil {
			t.Fatal(err)
		}
		elsewhere := pgtest.StartServerTLS(t, pgtest.TLS{CA: certs.CA, Cert: filepath.Join(certs.Dir, "elsewhere.pem"), Key: filepath.Join(certs.Dir, "elsewhere-key.pem")})
		openFails(t, elsewhere.DSN("postgres"), "cannot validate certificate for 127.0.0.1")
		roundTrip(t, with(t, elsewhere.DSN("postgres"), "sslmode", "verify-ca"))
	})
	// sslmode=require without sslrootcert encrypts but does not verify the
	// server: a server of any CA is accepted. Not for production.
	t.Run("require-without-rootcert", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir()) // no ~/.postgresql/root.crt
		roundTrip(t, with(t, dsn, "sslmode", "require", "sslrootcert", ""))
	})
	// verify-full without sslrootcert reads ~/.postgresql/root.crt (as
	// libpq does) and, without it, the system's roots: our CA is in
	// neither, so the server is not trusted.
	t.Run("verify-full-without-rootcert", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir())
		openFails(t, with(t, dsn, "sslrootcert", ""), "certificate signed by unknown authority")
	})
	// With ~/.postgresql/root.crt, verify-full without sslrootcert trusts
	// it, and sslmode=require verifies the chain too (as verify-ca): a
	// root.crt of another CA makes require fail.
	t.Run("home-root-crt", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("HOME", home)
		writeRootCrt(t, home, certs.CA)
		roundTrip(t, with(t, dsn, "sslrootcert", ""))
		writeRootCrt(t, home, pgtest.IssueCerts(t).CA)
		openFails(t, with(t, dsn, "sslmode", "require", "sslrootcert", ""), "certificate signed by unknown authority")
	})
}

// writeRootCrt copies ca to home/.postgresql/root.crt.
func writeRootCrt(t *testing.T, home, ca string) {
	t.Helper()
	b, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".postgresql"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".postgresql", "root.crt"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A server that authenticates with client certificates (pg_hba "cert"):
// the certificate's common name is the user.
func TestPostgresTLSClientCert(t *testing.T) {
	certs := pgtest.IssueCerts(t)
	srv := pgtest.StartServerTLS(t, certs.TLS(true))
	dsn := srv.DSN("postgres")

	t.Run("client-cert", func(t *testing.T) {
		roundTrip(t, with(t, dsn, "sslcert", certs.ClientCert, "sslkey", certs.ClientKey))
	})
	t.Run("no-client-cert", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir()) // no ~/.postgresql/postgresql.crt
		openFails(t, dsn, "connection requires a valid client certificate")
	})
	// A certificate of the right CA for another name is not the user.
	t.Run("other-name", func(t *testing.T) {
		if _, err := tlsconfig.Issue(certs.Dir, tlsconfig.CertSpec{Name: "mallory"}, tlsconfig.InitOptions{}); err != nil {
			t.Fatal(err)
		}
		openFails(t, with(t, dsn, "sslcert", filepath.Join(certs.Dir, "mallory.pem"), "sslkey", filepath.Join(certs.Dir, "mallory-key.pem")),
			`certificate authentication failed for user "reeve"`)
	})
	// A certificate of another CA named reeve is refused in the handshake.
	// The client may not see why: in TLS 1.3 it finishes its side of the
	// handshake before the server checks its certificate, so the server's
	// alert ("tls: unknown certificate authority") can arrive after the
	// client's next write failed ("connection reset by peer").
	t.Run("other-ca", func(t *testing.T) {
		other := pgtest.IssueCerts(t)
		openFails(t, with(t, dsn, "sslcert", other.ClientCert, "sslkey", other.ClientKey), "")
	})
}

package pgtest_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reeve-org/reeve/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func query(t *testing.T, dsn string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// Two tests on the shared server get databases of their own.
func TestStartGivesFreshDatabases(t *testing.T) {
	a, b := pgtest.Start(t), pgtest.Start(t)
	if a == b {
		t.Fatalf("two Starts gave the same database %s", a)
	}
	for _, dsn := range []string{a, b} {
		if err := query(t, dsn); err != nil {
			t.Fatalf("query %s: %v", dsn, err)
		}
	}
}

// A server of the test's own stops (connections refused) and starts again
// on the same port.
func TestServerStopStart(t *testing.T) {
	srv := pgtest.StartServer(t)
	dsn := srv.DSN("postgres")
	if err := query(t, dsn); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	if err := query(t, dsn); err == nil {
		t.Fatal("query succeeded on a stopped server")
	}
	srv.Start(t)
	if err := query(t, dsn); err != nil {
		t.Fatalf("after Start: %v", err)
	}
}

// A TLS server accepts its verify-full DSN and refuses plaintext; with
// client certificate auth it wants the certificate too.
func TestServerTLS(t *testing.T) {
	certs := pgtest.IssueCerts(t)
	for _, clientCert := range []bool{false, true} {
		srv := pgtest.StartServerTLS(t, certs.TLS(clientCert))
		dsn := srv.DSN("postgres")
		withCert := dsn + "&sslcert=" + url.QueryEscape(certs.ClientCert) + "&sslkey=" + url.QueryEscape(certs.ClientKey)
		if err := query(t, withCert); err != nil {
			t.Fatalf("client cert %v: verify-full with a client certificate: %v", clientCert, err)
		}
		err := query(t, dsn)
		if clientCert && err == nil {
			t.Fatal("cert auth: a connection without a client certificate was accepted")
		}
		if !clientCert && err != nil {
			t.Fatalf("trust over TLS: %v", err)
		}
		plain := strings.Replace(dsn, "sslmode=verify-full", "sslmode=disable", 1)
		if err := query(t, plain); err == nil {
			t.Fatalf("client cert %v: a plaintext connection was accepted", clientCert)
		}
		// pgtest's own connections (the socket) still work.
		if _, err := srv.CreateDatabase(context.Background(), "other"); err != nil {
			t.Fatal(err)
		}
	}
}

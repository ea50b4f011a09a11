package pgserver_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reeve-org/reeve/internal/pgserver"
)

// What `reeve bench --archive-dsn pg` relies on: Launch gives a server that
// answers on its DSN, and Close stops it.
func TestLaunchServesUntilClose(t *testing.T) {
	srv, err := pgserver.Launch()
	if errors.Is(err, pgserver.ErrMissing) && os.Getenv("REEVE_REQUIRE_BINARIES") != "1" {
		t.Skipf("%v (set REEVE_REQUIRE_BINARIES=1 to fail instead)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	query := func() error {
		conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
	if err := query(); err != nil {
		t.Fatalf("query %s: %v", srv.DSN("postgres"), err)
	}
	srv.Close()
	if err := query(); err == nil {
		t.Fatalf("%s still answers after Close", srv.DSN("postgres"))
	}
}

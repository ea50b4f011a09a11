package main

import (
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
)

// `reeve dev` keeps finished tasks in an archive: by default a SQLite file
// in its data directory, or the PostgreSQL database --archive-dsn names. A
// task that ended leaves etcd for it, and the CLI reads it as before.
// "postgres-tls" is production's mode: a server that accepts TLS only,
// verified (verify-full), with client-certificate authentication.
func TestDevArchivesFinishedTasks(t *testing.T) {
	for _, kind := range []string{"default", "postgres", "postgres-tls"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--demo", "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--data-dir", dir, "--archive-grace", "0s"}
			dsn := "sqlite:" + filepath.Join(dir, "archive.db")
			switch kind {
			case "postgres":
				dsn = pgtest.Start(t)
				args = append(args, "--archive-dsn", dsn)
			case "postgres-tls":
				certs := pgtest.IssueCerts(t)
				srv := pgtest.StartServerTLS(t, certs.TLS(true))
				dsn = srv.DSN("postgres") + "&sslcert=" + url.QueryEscape(certs.ClientCert) + "&sslkey=" + url.QueryEscape(certs.ClientKey)
				args = append(args, "--archive-dsn", dsn)
			}
			addr, _, _ := startDev(t, args...)
			env := map[string]string{"REEVE_ADDRESS": addr}
			waitUntil(t, time.Minute, "the demo workflows to be registered", func() bool {
				code, _, _ := reeveEnv(t, env, "workflow", "get", "demo.orders")
				return code == 0
			})
			code, out, errOut := reeveEnv(t, env, "task", "submit", "--workflow", "demo.orders", "--id", "order-archived", "--wait", "-o", "json")
			if code != 0 {
				t.Fatalf("submit: exit %d: %s", code, errOut)
			}

			a, err := archive.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			waitUntil(t, time.Minute, "the task to move to the archive", func() bool {
				has, err := a.Has(context.Background(), "default", []string{"order-archived"})
				return err == nil && has["order-archived"]
			})
			code, got, errOut := reeveEnv(t, env, "task", "get", "order-archived", "-o", "json")
			if code != 0 {
				t.Fatalf("task get of the archived task: exit %d: %s", code, errOut)
			}
			var ended, read struct{ ID, State string }
			if json.Unmarshal([]byte(out), &ended) != nil || json.Unmarshal([]byte(got), &read) != nil || read != ended || read.State != "TASK_STATE_SUCCEEDED" {
				t.Fatalf("task get of the archived task = %s; want it as it ended: %s", got, out)
			}
		})
	}
}
